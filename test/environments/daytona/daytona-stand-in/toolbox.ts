/**
 * The Daytona stand-in's toolbox API (the sandbox daemon's, reached through the toolbox proxy URL + the sandbox id):
 * process/execute, sessions (create, exec sync or async, command status, logs plain or followed over a websocket,
 * input, delete) and files (bulk-upload as multipart, bulk-download as a multipart reply). Not served: code-run,
 * PTYs, git, LSP, computer use, and process/execute's own timeout (Rollout times its commands itself).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import path from 'node:path';
import type { Duplex } from 'node:stream';

import busboy from 'busboy';
import tarStream from 'tar-stream';
import { WebSocketServer } from 'ws';

import type { Runner } from './runner';
import { Session, STDERR_PREFIX, STDOUT_PREFIX } from './sessions';

/** What the toolbox needs of a sandbox: its container, while it runs. */
export type ContainerOf = (sandboxId: string) => string | undefined;

export class Toolbox {
  private readonly sessions = new Map<string, Map<string, Session>>();
  private readonly sockets = new WebSocketServer({ noServer: true });

  constructor(
    private readonly runner: Runner,
    private readonly containerOf: ContainerOf
  ) {}

  /** Forgets a deleted sandbox's sessions. */
  forget(sandboxId: string): void {
    this.sessions.delete(sandboxId);
  }

  /** Serves `/<sandbox id>/<toolbox path>`; errors as the daemon's `{ statusCode, message }`. */
  async handle(request: IncomingMessage, response: ServerResponse, pathname: string): Promise<void> {
    const [sandboxId = '', ...rest] = pathname.replace(/^\/+/, '').split('/');
    const route = `/${rest.join('/')}`;
    const containerId = this.containerOf(sandboxId);
    if (!containerId) return json(response, 404, { statusCode: 404, message: `sandbox ${sandboxId} is not running` });
    const sessions = this.sessionsOf(sandboxId);
    const method = request.method ?? 'GET';
    if (method === 'POST' && route === '/files/bulk-upload') return this.upload(request, response, containerId);
    if (method === 'POST' && route === '/files/bulk-download') {
      const { paths } = (await body(request)) as { paths: string[] };
      return this.download(response, containerId, paths);
    }
    if (method === 'POST' && route === '/process/execute') {
      const { command, cwd, envs } = (await body(request)) as {
        command: string;
        cwd?: string;
        envs?: Record<string, string>;
      };
      const running = await this.runner.exec(containerId, ['/bin/sh'], { cwd, env: envs });
      running.stdin.end(command);
      const chunks: Buffer[] = [];
      running.stdout.on('data', (chunk: Buffer) => chunks.push(chunk));
      running.stderr.on('data', (chunk: Buffer) => chunks.push(chunk));
      const exitCode = await running.exited;
      return json(response, 200, { exitCode: exitCode ?? -1, result: Buffer.concat(chunks).toString('utf8') });
    }
    if (method === 'POST' && route === '/process/session') {
      const { sessionId } = (await body(request)) as { sessionId: string };
      if (sessions.has(sessionId)) return json(response, 409, { statusCode: 409, message: 'session already exists' });
      sessions.set(sessionId, new Session(sessionId, this.runner, containerId));
      return json(response, 201, {});
    }
    const match = /^\/process\/session\/([^/]+)(?:\/(exec|command\/([^/]+)(?:\/(logs|input))?))?$/.exec(route);
    const session = match && sessions.get(decodeURIComponent(match[1]!));
    if (!match || !session) return json(response, 404, { statusCode: 404, message: `no route or session: ${route}` });
    if (method === 'DELETE' && !match[2]) {
      await session.kill();
      sessions.delete(session.id);
      return json(response, 204, undefined);
    }
    if (method === 'POST' && match[2] === 'exec') {
      const request_ = (await body(request)) as {
        command: string;
        runAsync?: boolean;
        async?: boolean;
        suppressInputEcho?: boolean;
      };
      const command = await session.execute(request_.command, request_.suppressInputEcho ?? false);
      if (request_.runAsync || request_.async) return json(response, 202, { cmdId: command.id });
      await command.done;
      const output = command.output();
      return json(response, 200, {
        cmdId: command.id,
        output: strip(output).toString('utf8'),
        exitCode: command.exitCode,
        ...demux(output),
      });
    }
    const command = match[3] ? session.commands.get(decodeURIComponent(match[3])) : undefined;
    if (!command) return json(response, 404, { statusCode: 404, message: 'command not found' });
    if (method === 'GET' && !match[4]) {
      return json(response, 200, { id: command.id, command: command.command, exitCode: command.exitCode ?? undefined });
    }
    if (method === 'GET' && match[4] === 'logs') {
      const output = command.output();
      return json(response, 200, { output: strip(output).toString('utf8'), ...demux(output) });
    }
    if (method === 'POST' && match[4] === 'input') {
      if (command.exitCode !== null) {
        return json(response, 410, {
          statusCode: 410,
          message: `command has already completed with exit code ${command.exitCode}`,
        });
      }
      command.input(((await body(request)) as { data: string }).data);
      return json(response, 200, {});
    }
    return json(response, 404, { statusCode: 404, message: `no route: ${method} ${route}` });
  }

  /** A websocket upgrade of `/<sandbox>/process/session/<id>/command/<id>/logs?follow=true`: the log as it grows. */
  upgrade(request: IncomingMessage, socket: Duplex, head: Buffer, pathname: string): void {
    const match = /^\/([^/]+)\/process\/session\/([^/]+)\/command\/([^/]+)\/logs$/.exec(pathname);
    const command = match && this.sessionsOf(match[1]!).get(decodeURIComponent(match[2]!))?.commands.get(match[3]!);
    if (!command) {
      socket.end('HTTP/1.1 404 Not Found\r\n\r\n');
      return;
    }
    this.sockets.handleUpgrade(request, socket, head, (ws) => {
      const stop = command.follow(
        (chunk) => ws.send(chunk),
        () => ws.close(1000)
      );
      ws.once('close', stop);
    });
  }

  private sessionsOf(sandboxId: string): Map<string, Session> {
    let sessions = this.sessions.get(sandboxId);
    if (!sessions) this.sessions.set(sandboxId, (sessions = new Map<string, Session>()));
    return sessions;
  }

  /** Each `files[i].file` part written at its `files[i].path` (folders made as needed), as one archive each. */
  private upload(request: IncomingMessage, response: ServerResponse, containerId: string): Promise<void> {
    return new Promise((resolve, reject) => {
      const parser = busboy({ headers: request.headers });
      const writes: Promise<void>[] = [];
      parser.on('file', (name, file) => {
        const chunks: Buffer[] = [];
        file.on('data', (chunk: Buffer) => chunks.push(chunk));
        file.once('end', () => {
          // The part's file name is the destination (the SDK sends it as both the path field and the file name).
          const destination = (name.endsWith('.file') && paths.get(name.replace(/\.file$/, '.path'))) || '';
          writes.push(this.writeFile(containerId, destination, Buffer.concat(chunks)));
        });
      });
      const paths = new Map<string, string>();
      parser.on('field', (name, value) => paths.set(name, value));
      parser.once('close', () => {
        Promise.all(writes)
          .then(() => json(response, 200, {}), reject)
          .then(resolve, reject);
      });
      parser.once('error', reject);
      request.pipe(parser);
    });
  }

  private async writeFile(containerId: string, destination: string, content: Buffer): Promise<void> {
    if (!path.posix.isAbsolute(destination)) throw new Error(`upload path ${destination} is not absolute`);
    const pack = tarStream.pack();
    pack.entry({ name: path.posix.basename(destination), mode: 0o644, size: content.length }, content);
    pack.finalize();
    const dir = path.posix.dirname(destination);
    await this.runner.execToEnd(containerId, ['mkdir', '-p', dir]);
    await this.runner.docker
      .getContainer(containerId)
      .putArchive(pack as unknown as NodeJS.ReadableStream, { path: dir });
  }

  /** A multipart reply: each path's content as a `file` part named after it, or an `error` part. */
  private async download(response: ServerResponse, containerId: string, paths: string[]): Promise<void> {
    const boundary = `standin${Date.now()}`;
    response.writeHead(200, { 'Content-Type': `multipart/form-data; boundary=${boundary}` });
    for (const source of paths) {
      const archive = await this.runner.docker
        .getContainer(containerId)
        .getArchive({ path: source })
        .catch((err: Error & { statusCode?: number }) => {
          if (err.statusCode === 404) return null;
          throw err;
        });
      if (!archive) {
        response.write(
          `--${boundary}\r\nContent-Disposition: form-data; name="error"; filename="${source}"\r\n` +
            `Content-Type: application/json\r\n\r\n${JSON.stringify({ statusCode: 404, message: `file not found: ${source}` })}\r\n`
        );
        continue;
      }
      response.write(
        `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="${source}"\r\n` +
          'Content-Type: application/octet-stream\r\n\r\n'
      );
      await new Promise<void>((resolve, reject) => {
        const extract = tarStream.extract();
        extract.on('entry', (_header, stream, next) => {
          stream.on('data', (chunk: unknown) => void response.write(chunk as Buffer));
          stream.once('end', next);
          stream.resume();
        });
        extract.once('finish', resolve).once('error', reject);
        archive.pipe(extract);
      });
      response.write('\r\n');
    }
    response.end(`--${boundary}--\r\n`);
  }
}

/** The log without its prefixes (combined output). */
function strip(log: Buffer): Buffer {
  return Buffer.concat(pieces(log).map(({ data }) => data));
}

function demux(log: Buffer): { stdout: string; stderr: string } {
  const of = (stderr: boolean) =>
    Buffer.concat(
      pieces(log)
        .filter((piece) => piece.stderr === stderr)
        .map(({ data }) => data)
    ).toString('utf8');
  return { stdout: of(false), stderr: of(true) };
}

/** The log's pieces in order, each running from its prefix to the next prefix. */
function pieces(log: Buffer): { stderr: boolean; data: Buffer }[] {
  const found: { stderr: boolean; data: Buffer }[] = [];
  let at = 0;
  while (at < log.length) {
    const out = log.indexOf(STDOUT_PREFIX, at + 3);
    const err = log.indexOf(STDERR_PREFIX, at + 3);
    const end = Math.min(out < 0 ? log.length : out, err < 0 ? log.length : err);
    found.push({ stderr: log.subarray(at, at + 3).equals(STDERR_PREFIX), data: log.subarray(at + 3, end) });
    at = end;
  }
  return found;
}

export function body(request: IncomingMessage): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.once('end', () => {
      const text = Buffer.concat(chunks).toString('utf8');
      try {
        resolve(text ? JSON.parse(text) : {});
      } catch (err) {
        reject(err instanceof Error ? err : new Error(String(err)));
      }
    });
    request.once('error', reject);
  });
}

export function json(response: ServerResponse, status: number, value: unknown): void {
  if (value === undefined) {
    response.writeHead(status).end();
    return;
  }
  response.writeHead(status, { 'Content-Type': 'application/json' }).end(JSON.stringify(value));
}
