/**
 * The Daytona stand-in's "runner": sandboxes as containers of the local Docker engine, images built there with
 * BuildKit (the docker buildx CLI, as Daytona's builder runs a Dockerfile), commands through docker exec (where the
 * real sandbox's daemon forks them itself). Everything it makes carries the stand-in instance's label.
 */
import { spawn } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { PassThrough, Readable } from 'node:stream';

import Docker from 'dockerode';
import tarFs from 'tar-fs';

/** On every container and image a stand-in makes: which stand-in instance, so it removes only its own. */
export const STAND_IN_LABEL = 'rollout.daytona-stand-in';

export interface SandboxSpec {
  image: string;
  sandboxId: string;
  env: Record<string, string>;
  cpu: number;
  memoryGiB: number;
}

export interface RunningExec {
  /** Standard input of the process (open while it runs). */
  stdin: NodeJS.WritableStream;
  stdout: PassThrough;
  stderr: PassThrough;
  /** The exit code once the process ends (null: lost with its container). */
  exited: Promise<number | null>;
}

export class Runner {
  readonly docker = new Docker();

  constructor(readonly instance: string) {}

  get labels(): Record<string, string> {
    return { [STAND_IN_LABEL]: this.instance };
  }

  /**
   * Builds `dockerfile` over the context archives (each extracted in turn into one folder, as Daytona's builder does
   * with the archives of an Image's context): the build log, and whether it succeeded.
   */
  async build(tag: string, dockerfile: string, contexts: Buffer[]): Promise<{ ok: boolean; log: string }> {
    const dir = await mkdtemp(path.join(tmpdir(), 'daytona-stand-in-build-'));
    try {
      const context = path.join(dir, 'context');
      await mkdir(context);
      for (const archive of contexts) {
        await new Promise<void>((resolve, reject) => {
          const extract = tarFs.extract(context);
          extract.on('finish', resolve).on('error', reject);
          Readable.from(archive).pipe(extract);
        });
      }
      const file = path.join(dir, 'Dockerfile');
      await writeFile(file, dockerfile);
      const args = ['buildx', 'build', '--load', '--progress=plain', '-t', tag, '-f', file];
      for (const [key, value] of Object.entries(this.labels)) args.push('--label', `${key}=${value}`);
      return await run('docker', [...args, context]);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }

  /**
   * A sandbox: PID 1 only sleeps (Daytona's daemon is PID 1 and outlives whatever a command kills), and the image's
   * entrypoint runs beside it, as Daytona's daemon runs it in its entrypoint session.
   */
  async start(spec: SandboxSpec): Promise<string> {
    const config = (await this.docker.getImage(spec.image).inspect()).Config;
    // As Daytona's runner: the daemon runs the image's ENTRYPOINT (not its CMD), and an image without a WORKDIR
    // works in the user's home, flagged by DAYTONA_USER_HOME_AS_WORKDIR.
    const entrypoint = [...(config?.Entrypoint ?? [])];
    const homeAsWorkdir = !config?.WorkingDir;
    const container = await this.docker.createContainer({
      Image: spec.image,
      Entrypoint: ['sleep'],
      Cmd: ['infinity'],
      User: 'root',
      ...(homeAsWorkdir ? { WorkingDir: '/root' } : {}),
      Env: [
        ...Object.entries(spec.env).map(([key, value]) => `${key}=${value}`),
        ...(homeAsWorkdir ? ['DAYTONA_USER_HOME_AS_WORKDIR=true'] : []),
      ],
      Labels: { ...this.labels, 'daytona.sandbox': spec.sandboxId },
      HostConfig: { NanoCpus: spec.cpu * 1e9, Memory: spec.memoryGiB * 2 ** 30 },
    });
    await container.start();
    if (entrypoint.length && entrypoint.join(' ') !== 'sleep infinity') {
      const exec = await container.exec({ Cmd: entrypoint, AttachStdout: false, AttachStderr: false });
      await exec.start({ Detach: true });
    }
    return container.id;
  }

  /** Runs a command in a sandbox's container, its standard streams attached. */
  async exec(
    containerId: string,
    command: string[],
    options: { env?: Record<string, string>; cwd?: string } = {}
  ): Promise<RunningExec> {
    const exec = await this.docker.getContainer(containerId).exec({
      Cmd: command,
      AttachStdin: true,
      AttachStdout: true,
      AttachStderr: true,
      Env: Object.entries(options.env ?? {}).map(([key, value]) => `${key}=${value}`),
      WorkingDir: options.cwd,
      User: 'root',
    });
    const stream = await exec.start({ hijack: true, stdin: true });
    const stdout = new PassThrough();
    const stderr = new PassThrough();
    this.docker.modem.demuxStream(stream, stdout, stderr);
    const exited = new Promise<number | null>((resolve) => {
      stream.once('end', () => {
        stdout.end();
        stderr.end();
        exec.inspect().then(
          (info) => resolve(info.ExitCode ?? null),
          () => resolve(null)
        );
      });
    });
    return { stdin: stream, stdout, stderr, exited };
  }

  /** Runs a command to its end: its exit code and combined output. */
  async execToEnd(containerId: string, command: string[]): Promise<{ exitCode: number | null; output: string }> {
    const running = await this.exec(containerId, command);
    running.stdin.end();
    const chunks: Buffer[] = [];
    running.stdout.on('data', (chunk: Buffer) => chunks.push(chunk));
    running.stderr.on('data', (chunk: Buffer) => chunks.push(chunk));
    const exitCode = await running.exited;
    return { exitCode, output: Buffer.concat(chunks).toString('utf8') };
  }

  /** Connects a sandbox's container to Docker's bridge network, or disconnects it (only loopback left). */
  async setNetwork(containerId: string, connected: boolean): Promise<void> {
    const bridge = this.docker.getNetwork('bridge');
    if (connected) await bridge.connect({ Container: containerId });
    else await bridge.disconnect({ Container: containerId, Force: true });
  }

  async remove(containerId: string): Promise<void> {
    await this.docker
      .getContainer(containerId)
      .remove({ force: true })
      .catch((err: { statusCode?: number }) => {
        if (err.statusCode !== 404) throw err;
      });
  }

  async stop(containerId: string): Promise<void> {
    await this.docker
      .getContainer(containerId)
      .stop({ t: 0 })
      .catch((err: { statusCode?: number }) => {
        if (err.statusCode !== 304 && err.statusCode !== 404) throw err;
      });
  }

  async startAgain(containerId: string): Promise<void> {
    await this.docker
      .getContainer(containerId)
      .start()
      .catch((err: { statusCode?: number }) => {
        if (err.statusCode !== 304) throw err;
      });
  }

  /** Removes every container and image of this instance. */
  async removeAll(): Promise<void> {
    const filters = { label: [`${STAND_IN_LABEL}=${this.instance}`] };
    for (const container of await this.docker.listContainers({ all: true, filters })) await this.remove(container.Id);
    for (const image of await this.docker.listImages({ filters })) {
      for (const tag of image.RepoTags ?? [image.Id]) {
        await this.docker
          .getImage(tag)
          .remove({ force: true })
          .catch(() => undefined); // already gone with another tag
      }
    }
  }
}

/** Runs a CLI to its end: exit status and combined output. */
function run(command: string, args: string[]): Promise<{ ok: boolean; log: string }> {
  return new Promise((resolve) => {
    const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    const chunks: Buffer[] = [];
    child.stdout.on('data', (chunk: Buffer) => chunks.push(chunk));
    child.stderr.on('data', (chunk: Buffer) => chunks.push(chunk));
    child.once('error', (err) => chunks.push(Buffer.from(err.message)));
    child.once('close', (code) => resolve({ ok: code === 0, log: Buffer.concat(chunks).toString('utf8') }));
  });
}
