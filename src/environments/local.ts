import { spawn } from 'node:child_process';
import { cp, lstat, mkdir, mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';

import type { EnvironmentHandle } from '../trial/types';
import type { BuildResult, Environment, ExecRequest, ExecResult, StartRequest, StartResult } from './environment';

const OUTPUT_LIMIT = 1024 * 1024;
/** Container paths that a local environment maps into its root folder. */
const MAPPED_ROOTS = ['/logs', '/tests', '/oracle', '/installed-agent', '/app'];
const ROOT_PREFIX = 'rollout-local-';

/**
 * Runs a trial's steps as host processes in a temporary folder: no isolation, no resource limits. For smoke tests and
 * orchestration benchmarks. Tasks refer to $ROLLOUT_LOGS_DIR, $ROLLOUT_TESTS_DIR, … instead of /logs, /tests, ….
 */
export class LocalEnvironment implements Environment {
  readonly type = 'local';

  ping(): Promise<void> {
    return Promise.resolve();
  }

  build(): Promise<BuildResult> {
    return Promise.resolve({ image: 'local', built: false });
  }

  async start(request: StartRequest): Promise<StartResult> {
    const root = await mkdtemp(path.join(tmpdir(), `${ROOT_PREFIX}${trialTag(request.trialId)}-`));
    for (const dir of ['logs/agent', 'logs/verifier', 'app']) await mkdir(path.join(root, dir), { recursive: true });
    return { handle: { id: root, workdir: path.join(root, 'app') }, unenforced: ['cpus', 'memory', 'storage'] };
  }

  exec(handle: EnvironmentHandle, request: ExecRequest): Promise<ExecResult> {
    const root = handle.id;
    return new Promise((resolve, reject) => {
      const child = spawn('bash', ['-c', request.command], {
        cwd: request.cwd ? mapPath(root, request.cwd) : handle.workdir,
        env: { ...process.env, ...localVariables(root), ...request.env },
        detached: true, // its own process group, so a timeout kills everything it started
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let stdout = '';
      let stderr = '';
      let timedOut = false;
      child.stdout.on('data', (chunk: Buffer) => (stdout = keepTail(stdout + chunk.toString())));
      child.stderr.on('data', (chunk: Buffer) => (stderr = keepTail(stderr + chunk.toString())));
      const killGroup = () => {
        try {
          process.kill(-child.pid!, 'SIGKILL');
        } catch {
          // Already gone.
        }
      };
      const timer = request.timeoutMs
        ? setTimeout(() => {
            timedOut = true;
            killGroup();
          }, request.timeoutMs)
        : undefined;
      const onAbort = () => killGroup();
      request.signal?.addEventListener('abort', onAbort, { once: true });
      child.once('error', reject);
      child.once('close', (code) => {
        clearTimeout(timer);
        request.signal?.removeEventListener('abort', onAbort);
        if (request.signal?.aborted)
          reject(request.signal.reason instanceof Error ? request.signal.reason : new Error('aborted'));
        else resolve({ exitCode: timedOut ? null : code, stdout, stderr, timedOut });
      });
    });
  }

  async upload(handle: EnvironmentHandle, hostPath: string, containerPath: string): Promise<void> {
    const target = mapPath(handle.id, containerPath);
    await mkdir(target, { recursive: true });
    const info = await lstat(hostPath);
    const destination = info.isDirectory() ? target : path.join(target, path.basename(hostPath));
    await cp(hostPath, destination, { recursive: true, verbatimSymlinks: true });
  }

  async download(handle: EnvironmentHandle, containerPath: string, hostDir: string): Promise<void> {
    const source = mapPath(handle.id, containerPath);
    await mkdir(hostDir, { recursive: true });
    await copyRegular(source, hostDir);
  }

  stop(): Promise<void> {
    return Promise.resolve();
  }

  async remove(handle: EnvironmentHandle): Promise<void> {
    await rm(handle.id, { recursive: true, force: true });
  }

  async removeTrial(trialId: string): Promise<number> {
    const prefix = `${ROOT_PREFIX}${trialTag(trialId)}-`;
    const roots = (await readdir(tmpdir())).filter((name) => name.startsWith(prefix));
    await Promise.all(roots.map((name) => rm(path.join(tmpdir(), name), { recursive: true, force: true })));
    return roots.length;
  }

  removeImage(): Promise<boolean> {
    return Promise.resolve(true);
  }
}

/** Where a container path lives under a local environment's root; other paths are the host's own. */
export function mapPath(root: string, containerPath: string): string {
  const mapped = MAPPED_ROOTS.find((prefix) => containerPath === prefix || containerPath.startsWith(`${prefix}/`));
  return mapped ? path.join(root, containerPath) : containerPath;
}

function localVariables(root: string): Record<string, string> {
  return {
    ROLLOUT_ROOT: root,
    ROLLOUT_LOGS_DIR: path.join(root, 'logs'),
    ROLLOUT_TESTS_DIR: path.join(root, 'tests'),
    ROLLOUT_ORACLE_DIR: path.join(root, 'oracle'),
    ROLLOUT_AGENT_DIR: path.join(root, 'installed-agent'),
  };
}

/** Copies regular files and folders only: links are skipped, so nothing outside the source is read or written. */
async function copyRegular(source: string, target: string): Promise<void> {
  const entries = await readdir(source, { withFileTypes: true }).catch(() => []);
  for (const entry of entries) {
    const from = path.join(source, entry.name);
    const to = path.join(target, entry.name);
    if (entry.isDirectory()) {
      await mkdir(to, { recursive: true });
      await copyRegular(from, to);
    } else if (entry.isFile()) {
      await rm(to, { force: true });
      await cp(from, to);
    }
  }
}

function trialTag(trialId: string): string {
  return trialId.replace(/[^A-Za-z0-9._-]/g, '_').slice(-80);
}

function keepTail(text: string): string {
  return text.length > OUTPUT_LIMIT ? text.slice(-OUTPUT_LIMIT) : text;
}
