/**
 * The stand-in's task command router: Modal runs a sandbox's execs through a router beside its task, which the SDK
 * reaches with a JWT from SandboxGetCommandRouterAccess. Here an exec is a `docker exec` in the sandbox's container,
 * its stdin written and its stdout and stderr kept by offset, as the router's TaskExecStdinWrite and TaskExecStdioRead
 * address them (a reader resumes from the offset it had).
 */
import { EventEmitter } from 'node:events';
import { PassThrough } from 'node:stream';
import type { Duplex } from 'node:stream';

import type Docker from 'dockerode';

import type { Message } from './proto';

interface ExecRecord {
  output: [Buffer[], Buffer[]];
  sizes: [number, number];
  stdin: Duplex;
  stdinOffset: number;
  exitCode: number | null;
  done: boolean;
  changed: EventEmitter;
}

/** Per file descriptor of TaskExecStdioRead: 0 stdout, 1 stderr. */
type Fd = 0 | 1;

export class StandInExecs {
  private readonly execs = new Map<string, ExecRecord>();

  constructor(private readonly docker: Docker) {}

  /** TaskExecStart in the container: environment from the request's env map and its secret sources' env. */
  async start(containerId: string, request: Message): Promise<void> {
    const env: Record<string, string> = { ...(request.env as Record<string, string>) };
    for (const source of (request.secretSources as Message[] | undefined) ?? []) {
      Object.assign(env, ((source.env as Message | undefined)?.contents as Record<string, string>) ?? {});
    }
    const exec = await this.docker.getContainer(containerId).exec({
      Cmd: request.commandArgs as string[],
      Env: Object.entries(env).map(([key, value]) => `${key}=${value}`),
      ...(request.workdir ? { WorkingDir: request.workdir as string } : {}),
      AttachStdin: true,
      AttachStdout: true,
      AttachStderr: true,
    });
    const stream = await exec.start({ hijack: true, stdin: true });
    const record: ExecRecord = {
      output: [[], []],
      sizes: [0, 0],
      stdin: stream,
      stdinOffset: 0,
      exitCode: null,
      done: false,
      changed: new EventEmitter(),
    };
    record.changed.setMaxListeners(0);
    this.execs.set(request.execId as string, record);
    const sink = (fd: Fd) => {
      const pass = new PassThrough();
      pass.on('data', (chunk: Buffer) => {
        record.output[fd].push(chunk);
        record.sizes[fd] += chunk.length;
        record.changed.emit('change');
      });
      return pass;
    };
    this.docker.modem.demuxStream(stream, sink(0), sink(1));
    const finish = () => {
      if (record.done) return;
      void exec
        .inspect()
        .then((info) => info.ExitCode)
        .catch(() => null) // the container is gone with the exec
        .then((code) => {
          record.exitCode = code ?? 137;
          record.done = true;
          record.changed.emit('change');
        });
    };
    stream.on('end', finish);
    stream.on('close', finish);
    stream.on('error', finish);
  }

  /** TaskExecStdinWrite: bytes at `offset` (a retried write already taken is skipped), then EOF if asked. */
  stdinWrite(request: Message): void {
    const record = this.record(request.execId as string);
    const data = request.data as Buffer;
    const offset = request.offset as number;
    if (offset + data.length > record.stdinOffset && !record.done) {
      record.stdin.write(data.subarray(Math.max(0, record.stdinOffset - offset)));
      record.stdinOffset = offset + data.length;
    }
    if (request.eof && !record.done) record.stdin.end();
  }

  /** TaskExecStdioRead: the output from `offset` on, as it comes, until the exec has ended and all of it is sent. */
  async read(request: Message, send: (data: Buffer) => void, cancelled: () => boolean): Promise<void> {
    const record = this.record(request.execId as string);
    const fd = request.fileDescriptor === 1 ? 1 : 0;
    const offset = request.offset as number;
    // Chunks before the one holding `offset` are skipped; from there each is sent as it comes.
    let index = 0;
    let start = 0;
    for (;;) {
      const chunks = record.output[fd];
      for (; index < chunks.length; index++) {
        const chunk = chunks[index]!;
        if (start + chunk.length > offset) send(chunk.subarray(Math.max(0, offset - start)));
        start += chunk.length;
      }
      if (record.done || cancelled()) return;
      await new Promise((resolve) => record.changed.once('change', resolve));
    }
  }

  /** TaskExecWait: the exit code once the exec has ended (the SDK's own deadline bounds the call). */
  async wait(execId: string, cancelled: () => boolean): Promise<Message> {
    const record = this.record(execId);
    while (!record.done && !cancelled()) await new Promise((resolve) => record.changed.once('change', resolve));
    return { code: record.exitCode ?? 137 };
  }

  /** TaskExecPoll: the exit code, or nothing while it runs. */
  poll(execId: string): Message {
    const record = this.record(execId);
    return record.done ? { code: record.exitCode ?? 137 } : {};
  }

  private record(execId: string): ExecRecord {
    const record = this.execs.get(execId);
    if (!record) throw Object.assign(new Error(`no exec ${execId}`), { code: 5 });
    return record;
  }
}
