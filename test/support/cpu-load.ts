/**
 * CPU load for tests whose guarantee must hold on a loaded machine (races that a quiet machine hides): busy loops in
 * child processes, each ending itself after `maxMs` whatever happens to the test, stopped by the returned function.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';

export function cpuLoad(processes: number, maxMs = 15 * 60_000): () => Promise<void> {
  const loop = `const end = Date.now() + ${maxMs}; while (Date.now() < end) {}`;
  const children = Array.from({ length: processes }, () => spawn(process.execPath, ['-e', loop], { stdio: 'ignore' }));
  return async () => {
    await Promise.all(
      children.map(async (child) => {
        if (child.exitCode !== null || child.signalCode !== null) return;
        const exited = once(child, 'exit');
        child.kill('SIGKILL');
        await exited;
      })
    );
  };
}
