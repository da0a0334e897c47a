/**
 * The stand-in's envd, the daemon inside every E2B sandbox, as the SDK reaches it at E2B_SANDBOX_URL with the
 * sandbox's id in the `E2b-Sandbox-Id` header and its access token in `X-Access-Token`: GET /health, the files
 * endpoints (GET and POST /files, `path` and `username` in the query, octet-stream bodies), and the Connect process
 * service (process.Process: Start and Connect stream a process's events; SendInput, CloseStdin, SendSignal, List).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';

import { docker } from './docker-cli';
import type { ProcessEvents, StartSpec } from './processes';
import { SandboxProcess } from './processes';
import {
  basicUser,
  endOfStream,
  envelope,
  firstMessage,
  readBody,
  readJson,
  sendApiError,
  sendConnectError,
  sendEmpty,
  sendJson,
} from './wire';

export interface EnvdSandbox {
  containerId: string;
  envdAccessToken: string;
  /** The template's user (its last USER), for calls that name none. */
  defaultUser: string;
  envVars: Record<string, string>;
  processes: Map<number, SandboxProcess>;
  /** Working directories found to exist (asked once each). */
  knownDirs: Set<string>;
  /** False once the sandbox's envd no longer runs (killed from inside): envd's calls then fail as E2B's proxy does. */
  alive(): Promise<boolean>;
}

/** envd resolves a relative path against the user's home. */
const RESOLVE = 'case $1 in /*) f=$1 ;; *) f=$HOME/$1 ;; esac';

async function isDirectory(container: string, dir: string): Promise<boolean> {
  return (await docker(['exec', '-u', 'root', container, '/bin/sh', '-c', 'test -d "$1"', 'sh', dir])).code === 0;
}

interface ProcessSelector {
  process?: { pid?: number; tag?: string };
}

export async function serveEnvd(sandbox: EnvdSandbox, req: IncomingMessage, res: ServerResponse): Promise<void> {
  if (req.headers['x-access-token'] !== sandbox.envdAccessToken) {
    return sendApiError(res, 401, 'invalid access token');
  }
  if (!(await sandbox.alive())) return sendApiError(res, 502, 'The sandbox is not running (envd is gone)');
  const url = new URL(req.url ?? '/', 'http://envd');
  const user = basicUser(req) ?? sandbox.defaultUser;
  if (url.pathname === '/health') {
    return sendEmpty(res, 204);
  }
  if (url.pathname === '/files') return files(sandbox, req, res, url, user);
  const method = /^\/process\.Process\/(\w+)$/.exec(url.pathname)?.[1];
  switch (method) {
    case 'Start':
      return start(sandbox, req, res, user);
    case 'Connect':
      return connect(sandbox, req, res);
    case 'SendInput': {
      const call = await readJson<ProcessSelector & { input?: { stdin?: string } }>(req);
      const process = selected(sandbox, call, res);
      if (!process) return;
      process.writeStdin(Buffer.from(call.input?.stdin ?? '', 'base64'));
      return sendJson(res, 200, {});
    }
    case 'CloseStdin': {
      const process = selected(sandbox, await readJson<ProcessSelector>(req), res);
      if (!process) return;
      process.closeStdin();
      return sendJson(res, 200, {});
    }
    case 'SendSignal': {
      const call = await readJson<ProcessSelector & { signal?: string }>(req);
      const process = selected(sandbox, call, res);
      if (!process) return;
      await process.signal(call.signal === 'SIGNAL_SIGTERM' ? 'TERM' : 'KILL');
      return sendJson(res, 200, {});
    }
    case 'List':
      await readBody(req);
      return sendJson(res, 200, {
        processes: [...sandbox.processes.values()].map((p) => ({
          pid: p.pid,
          config: { cmd: p.spec.cmd, args: p.spec.args, envs: p.spec.envs, cwd: p.spec.cwd },
        })),
      });
    default:
      return sendConnectError(res, 'unimplemented', `the stand-in's envd does not serve ${url.pathname}`);
  }
}

function selected(sandbox: EnvdSandbox, call: ProcessSelector, res: ServerResponse): SandboxProcess | undefined {
  const process = sandbox.processes.get(call.process?.pid ?? -1);
  if (!process) sendConnectError(res, 'not_found', `process with pid ${call.process?.pid} not found`);
  return process;
}

/** Streams a process's events as envd does: start (its pid), data (stdout/stderr, base64), end, and keepalives. */
function streamEvents(req: IncomingMessage, res: ServerResponse): { events: ProcessEvents; done: () => void } {
  res.writeHead(200, { 'content-type': 'application/connect+json' });
  const pingSec = Number(req.headers['keepalive-ping-interval']) || 50;
  const keepalive = setInterval(() => res.write(envelope({ event: { keepalive: {} } })), pingSec * 1000);
  let finished = false;
  const done = () => {
    finished = true;
    clearInterval(keepalive);
  };
  res.on('close', done);
  const send = (event: unknown) => {
    if (!finished) res.write(envelope({ event }));
  };
  const events: ProcessEvents = {
    start: (pid) => send({ start: { pid } }),
    stdout: (data) => send({ data: { stdout: data.toString('base64') } }),
    stderr: (data) => send({ data: { stderr: data.toString('base64') } }),
    end: (exitCode, status) => {
      send({ end: { exitCode, exited: exitCode >= 0, status } });
      if (!finished) res.end(endOfStream());
      done();
    },
  };
  return { events, done };
}

async function start(sandbox: EnvdSandbox, req: IncomingMessage, res: ServerResponse, user: string): Promise<void> {
  const call = firstMessage<{
    process: { cmd: string; args?: string[]; envs?: Record<string, string>; cwd?: string };
    stdin?: boolean;
  }>(await readBody(req));
  // envd refuses a working directory that does not exist before starting anything (InvalidArgument "cwd '%s' does
  // not exist": envd/internal/services/process/handler/handler.go:239). Folders found once are not asked again.
  const cwd = call.process.cwd;
  if (cwd && !sandbox.knownDirs.has(cwd)) {
    if (!(await isDirectory(sandbox.containerId, cwd))) {
      res.writeHead(200, { 'content-type': 'application/connect+json' });
      res.end(endOfStream({ code: 'invalid_argument', message: `cwd '${cwd}' does not exist` }));
      return;
    }
    sandbox.knownDirs.add(cwd);
  }
  const spec: StartSpec = {
    container: sandbox.containerId,
    user,
    cmd: call.process.cmd,
    args: call.process.args ?? [],
    envs: { ...sandbox.envVars, ...call.process.envs },
    cwd: call.process.cwd,
    stdin: call.stdin ?? false,
  };
  if (globalThis.process.env.ROLLOUT_STAND_IN_TRACE === '1') {
    globalThis.process.stderr.write(`e2b stand-in: start ${JSON.stringify(spec.args.at(-1)).slice(0, 160)}\n`);
  }
  const { events } = streamEvents(req, res);
  const process = new SandboxProcess(spec, events, (started) => sandbox.processes.set(started.pid, started));
  // A process that ended is forgotten, as envd forgets it (its pid may be reused).
  process.listen({
    start: () => undefined,
    stdout: () => undefined,
    stderr: () => undefined,
    end: () => sandbox.processes.delete(process.pid),
  });
}

async function connect(sandbox: EnvdSandbox, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const call = firstMessage<ProcessSelector>(await readBody(req));
  const process = sandbox.processes.get(call.process?.pid ?? -1);
  if (!process) {
    res.writeHead(200, { 'content-type': 'application/connect+json' });
    res.end(endOfStream({ code: 'not_found', message: `process with pid ${call.process?.pid} not found` }));
    return;
  }
  const { events } = streamEvents(req, res);
  events.start(process.pid);
  process.listen(events);
  res.on('close', () => process.unlisten(events));
}

/** GET reads a file; POST (application/octet-stream, envd >= 0.5.7) writes one, making its folders. */
async function files(
  sandbox: EnvdSandbox,
  req: IncomingMessage,
  res: ServerResponse,
  url: URL,
  user: string
): Promise<void> {
  const file = url.searchParams.get('path');
  if (!file) return sendApiError(res, 400, 'missing path');
  if (req.method === 'GET') {
    const read = await docker([
      'exec',
      '-u',
      user,
      sandbox.containerId,
      '/bin/sh',
      '-c',
      `${RESOLVE}; [ -d "$f" ] && exit 21; [ -e "$f" ] || exit 44; exec cat -- "$f"`,
      'sh',
      file,
    ]);
    if (read.code === 44) return sendApiError(res, 404, `path '${file}' does not exist`);
    if (read.code === 21) return sendApiError(res, 400, `path '${file}' is a directory`);
    if (read.code !== 0) return sendApiError(res, 500, `error reading file: ${read.stderr.trim()}`);
    res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': read.stdout.length });
    res.end(read.stdout);
    return;
  }
  if (req.method === 'POST') {
    if (!req.headers['content-type']?.startsWith('application/octet-stream')) {
      return sendApiError(res, 400, 'the stand-in takes uploads as application/octet-stream');
    }
    const written = await docker(
      [
        'exec',
        '-i',
        '-u',
        user,
        sandbox.containerId,
        '/bin/sh',
        '-c',
        `${RESOLVE}; mkdir -p "$(dirname "$f")" && cat > "$f" && echo "$f"`,
        'sh',
        file,
      ],
      req
    );
    if (written.code !== 0) return sendApiError(res, 500, `error writing file: ${written.stderr.trim()}`);
    const writtenPath = written.stdout.toString('utf8').trim();
    return sendJson(res, 200, [{ name: writtenPath.split('/').pop(), type: 'file', path: writtenPath }]);
  }
  return sendApiError(res, 405, `${req.method} /files`);
}
