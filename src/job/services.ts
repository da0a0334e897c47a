/**
 * job.yaml `services`: processes the `rollout` command starts before the job's trials and stops when it ends, such
 * as a model server on this machine (vLLM, llama.cpp's server, a scripted server for a dry run). Agents on the model
 * gateway reach such a server at its 127.0.0.1 address: the gateway runs in the worker, on this host, and forwards
 * the containers' calls to it. Each service's output goes to `<job>/services/<name>.log`. A service's command sees
 * `ROLLOUT_PACKAGE_DIR`, the folder of the Rollout package running it, so a job file copied elsewhere can still start
 * a program Rollout ships (examples/agents.yaml's scripted model server).
 */
import type { ChildProcess } from 'node:child_process';
import { spawn } from 'node:child_process';
import { mkdir, open, readFile } from 'node:fs/promises';
import path from 'node:path';

import { resolveEnv } from '../env-vars';
import type { ServiceConfig } from '../contracts/job-config';

const POLL_MS = 200;
const STOP_GRACE_MS = 5_000;
const LOG_TAIL_CHARS = 2_000;
/** Compiled, this module is dist/src/job/services.js: three folders below the package root. */
const PACKAGE_DIR = path.resolve(__dirname, '..', '..', '..');

export interface RunningServices {
  /** Stops every service (SIGTERM to its process group, SIGKILL after a grace period). */
  stop(): Promise<void>;
}

export class ServiceStartError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ServiceStartError';
  }
}

/**
 * Starts the services in order, each in its own process group, in its `cwd` (made absolute when the job file was
 * loaded); waits for each one's `ready_url` to answer. One that exits first, or is not ready in time, stops them all
 * and throws.
 */
export async function startServices(services: ServiceConfig[], logDir: string): Promise<RunningServices> {
  const started: ChildProcess[] = [];
  const stopAll = () => Promise.all(started.map(stopProcess)).then(() => undefined);
  // A `rollout` that exits without stopping them (an uncaught error) still takes its services down.
  const onExit = () => started.forEach((child) => signalGroup(child, 'SIGKILL'));
  process.once('exit', onExit);
  try {
    for (const service of services) {
      const logFile = path.join(logDir, `${service.name}.log`);
      started.push(await startService(service, logFile));
    }
  } catch (err) {
    await stopAll();
    process.removeListener('exit', onExit);
    throw err;
  }
  return {
    async stop() {
      await stopAll();
      process.removeListener('exit', onExit);
    },
  };
}

async function startService(service: ServiceConfig, logFile: string): Promise<ChildProcess> {
  await mkdir(path.dirname(logFile), { recursive: true });
  const env = { ...process.env, ROLLOUT_PACKAGE_DIR: PACKAGE_DIR };
  const { command, ready_url: readyUrl } = resolveEnv(
    { command: service.command, ...(service.ready_url ? { ready_url: service.ready_url } : {}) },
    env
  );
  const log = await open(logFile, 'a');
  const child = spawn('bash', ['-c', command!], {
    cwd: service.cwd,
    env,
    detached: true,
    stdio: ['ignore', log.fd, log.fd],
  });
  // Listening before anything is awaited: a service that fails at once may exit before the next tick.
  const exited = new Promise<string>((resolve) => {
    child.once('exit', (code, signal) => resolve(signal ? `killed by ${signal}` : `exited ${code}`));
    child.once('error', (err) => resolve(`could not start: ${err.message}`));
  });
  await log.close();
  if (!readyUrl) return child;
  const deadline = Date.now() + service.ready_timeout_sec * 1000;
  const state: { ended: string | null } = { ended: null };
  void exited.then((how) => (state.ended = how));
  while (Date.now() < deadline) {
    if (state.ended !== null) {
      throw new ServiceStartError(
        `service ${service.name} ${state.ended} before ${readyUrl} answered: ${await outputSummary(logFile)}`
      );
    }
    const answered = await fetch(readyUrl, { signal: AbortSignal.timeout(2_000) }).then(
      (response) => response.body?.cancel().then(() => true) ?? true,
      () => false
    );
    if (answered) return child;
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
  await stopProcess(child);
  throw new ServiceStartError(
    `service ${service.name}: ${readyUrl} did not answer within ${service.ready_timeout_sec} s: ${await outputSummary(logFile)}`
  );
}

function signalGroup(child: ChildProcess, signal: NodeJS.Signals): void {
  if (child.pid === undefined || child.exitCode !== null || child.signalCode !== null) return;
  try {
    process.kill(-child.pid, signal);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ESRCH') throw err;
  }
}

async function stopProcess(child: ChildProcess): Promise<void> {
  if (child.pid === undefined || child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  signalGroup(child, 'SIGTERM');
  const timer = setTimeout(() => signalGroup(child, 'SIGKILL'), STOP_GRACE_MS);
  await exited;
  clearTimeout(timer);
}

/**
 * What a failed service printed: on the first line, the line that names its error (else its last line) or that it
 * printed nothing, with the log's path (the CLI shows an error's first line only); its output's end on the next lines.
 */
async function outputSummary(logFile: string): Promise<string> {
  const text = await readFile(logFile, 'utf8').catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT') return '';
    throw err;
  });
  const end = text.length > LOG_TAIL_CHARS ? `…${text.slice(-LOG_TAIL_CHARS)}` : text;
  const lines = end
    .split('\n')
    .map((line) => line.trim())
    .filter(Boolean);
  if (lines.length === 0) return `it printed nothing (${logFile})`;
  const named = lines.findLast((line) => /\b[A-Za-z]*(Error|Exception)\b|\berror\b|\bfatal\b/i.test(line));
  return `${named ?? lines[lines.length - 1]} (its output: ${logFile})\n${end}`;
}
