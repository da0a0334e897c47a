/**
 * A real git server on loopback (`git daemon`, git:// protocol) serving bare repositories from a scratch folder,
 * and a plain HTTP server for one file (a registry.json). Both run until stopped; every wait is bounded.
 */
import type { ChildProcess } from 'node:child_process';
import { execFileSync, spawn } from 'node:child_process';
import { createServer } from 'node:http';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { connect, createServer as createNetServer } from 'node:net';

import { waitFor } from './wait';

export async function freePort(): Promise<number> {
  const server = createNetServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => (socket.destroy(), resolve(true)));
    socket.once('error', () => resolve(false));
  });
}

export function git(cwd: string, ...args: string[]): string {
  return execFileSync('git', args, {
    cwd,
    encoding: 'utf8',
    env: {
      ...process.env,
      GIT_AUTHOR_NAME: 'test',
      GIT_AUTHOR_EMAIL: 'test@example.invalid',
      GIT_COMMITTER_NAME: 'test',
      GIT_COMMITTER_EMAIL: 'test@example.invalid',
    },
  }).trim();
}

export interface GitServer {
  url: (repo: string) => string;
  stop: () => Promise<void>;
}

/** `git daemon` exporting every repository under basePath, on a free loopback port. */
export async function startGitServer(basePath: string, port?: number): Promise<GitServer> {
  const listenPort = port ?? (await freePort());
  const daemon: ChildProcess = spawn(
    'git',
    ['daemon', '--reuseaddr', '--export-all', `--base-path=${basePath}`, '--listen=127.0.0.1', `--port=${listenPort}`],
    { stdio: 'ignore' }
  );
  const url = (repo: string) => `git://127.0.0.1:${listenPort}/${repo}`;
  await waitFor('git daemon to listen', () => accepts(listenPort), 10_000);
  return {
    url,
    stop: async () => {
      if (daemon.exitCode !== null) return;
      const exited = new Promise((resolve) => daemon.once('exit', resolve));
      daemon.kill('SIGTERM');
      await exited;
    },
  };
}

/** Serves `body()` at every path over HTTP on loopback. */
export async function serveFile(body: () => string): Promise<{ url: string; server: Server }> {
  const server = createServer((_request, response) => {
    response.writeHead(200, { 'content-type': 'application/json' });
    response.end(body());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}/registry.json`, server };
}
