/**
 * `npx rollout …` and `npm start` run the CLI as npm's grandchild (npm → sh → node). A SIGKILL of the command reaches
 * only npm: the CLI would live on as an orphan, holding this host's worker queue (workers/host-lease.ts) and writing
 * to a terminal or pipe nobody reads, so the same command run again would find the queue taken. A CLI started by npm
 * therefore stops as soon as that npm process is gone, as if it had been killed with it.
 */
import { isStillRunning, npmAncestor } from '../process-identity';

const CHECK_MS = 250;
/** 128 + SIGKILL: what the command would have exited with, had the signal reached it. */
const EXIT_KILLED = 137;

export function stopWithNpm(): void {
  const npm = npmAncestor();
  if (!npm) return;
  setInterval(() => {
    if (isStillRunning(npm.pid, npm.startTime)) return;
    console.error(`rollout: npm (pid ${npm.pid}), which ran this command, is gone: stopping with it`);
    process.exit(EXIT_KILLED);
  }, CHECK_MS).unref();
}
