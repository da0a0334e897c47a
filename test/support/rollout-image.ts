/**
 * The `rollout` image of the root Dockerfile (scripts/build-image.sh) for the cluster tests, built once per content of
 * its inputs: tagged rollout:<hash of the repository's files, Node.js and npm> and saved under
 * $ROLLOUT_CACHE_DIR/images/, so a re-run (a fresh Docker engine on CI) loads it instead of building it (minutes).
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readdir, rename, rm } from 'node:fs/promises';
import path from 'node:path';
import { promisify } from 'node:util';

import { hostCacheDir } from '../../src/host-cache';
import { REPO_ROOT } from './temporal';

const run = promisify(execFile);
const options = { cwd: REPO_ROOT, maxBuffer: 256 * 1024 * 1024, timeout: 30 * 60_000 };

/** The files the image keeps something of: the Dockerfile removes the tests and examples after the build. */
const PATHS = ['--', '.', ':!test', ':!examples'];

/** What the image is built from: the files git knows (as committed and as changed since), Node.js and npm. */
async function inputsHash(): Promise<string> {
  const hash = createHash('sha256');
  hash.update((await run('git', ['ls-files', '-s', ...PATHS], options)).stdout);
  hash.update((await run('git', ['diff', 'HEAD', '--binary', ...PATHS], options)).stdout);
  hash.update(process.version);
  hash.update((await run('npm', ['--version'], options)).stdout);
  return hash.digest('hex').slice(0, 16);
}

export interface RolloutImage {
  tag: string;
  /** How it came: already in Docker, loaded from the cache, or built (with build-image.sh's size and time line). */
  how: string;
}

/** The image in the local Docker engine, from Docker, the cache or a build (then saved for the next run). */
export async function rolloutImage(): Promise<RolloutImage> {
  const tag = `rollout:${await inputsHash()}`;
  const dir = path.join(hostCacheDir(), 'images');
  const saved = path.join(dir, `${tag.replace(':', '-')}.tar`);
  const inDocker = await run('docker', ['image', 'inspect', tag], options).then(
    () => true,
    () => false
  );
  if (inDocker) return { tag, how: 'in Docker' };
  if (existsSync(saved)) {
    await run('docker', ['load', '-q', '-i', saved], options);
    return { tag, how: `loaded from ${saved}` };
  }
  const built = await run('bash', [path.join(REPO_ROOT, 'scripts', 'build-image.sh'), tag], options);
  await mkdir(dir, { recursive: true });
  // One saved image at a time: older contents are of no use again.
  for (const old of await readdir(dir)) if (old.startsWith('rollout-')) await rm(path.join(dir, old), { force: true });
  await run('docker', ['save', '-o', `${saved}.partial`, tag], options);
  await rename(`${saved}.partial`, saved);
  return { tag, how: `built: ${built.stdout.trim()}` };
}
