import { createHash } from 'node:crypto';
import { constants } from 'node:fs';
import { existsSync } from 'node:fs';
import { lstat, mkdir, open, rm } from 'node:fs/promises';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import type { Readable } from 'node:stream';

import Docker from 'dockerode';
import tarFs from 'tar-fs';
import tarStream from 'tar-stream';

import type { EnvironmentHandle } from '../trial/types';
import type {
  BuildRequest,
  BuildResult,
  Environment,
  ExecRequest,
  ExecResult,
  StartRequest,
  StartResult,
} from './environment';
import { LABEL_ENV_KEY, LABEL_HOST, LABEL_JOB, LABEL_TRIAL, TaskEnvironmentError } from './environment';

const OUTPUT_LIMIT = 1024 * 1024;
const BUILD_OUTPUT_LINES = 40;
const IMAGE_REPOSITORY = 'rollout-env';

/** Trials in containers of the local (or DOCKER_HOST) Docker engine, through its API (dockerode). */
export class DockerEnvironment implements Environment {
  readonly type = 'docker';
  private readonly docker: Docker;
  private readonly hostId: string;
  /** Builds in flight by tag: concurrent trials of one environment wait for one build. */
  private readonly builds = new Map<string, Promise<BuildResult>>();

  constructor(options: { hostId: string; docker?: Docker }) {
    this.docker = options.docker ?? new Docker();
    this.hostId = options.hostId;
  }

  async ping(): Promise<void> {
    try {
      await this.docker.ping();
    } catch (err) {
      const where = process.env.DOCKER_HOST ?? '/var/run/docker.sock';
      throw new Error(`Docker daemon unreachable at ${where}: ${firstLine(err)}`, { cause: err });
    }
  }

  build(request: BuildRequest): Promise<BuildResult> {
    const key =
      request.dockerImage && !existsSync(path.join(request.contextDir, 'Dockerfile'))
        ? request.dockerImage
        : imageTag(request.envKey);
    let build = this.builds.get(key);
    if (!build) {
      build = this.buildOnce(request).finally(() => this.builds.delete(key));
      this.builds.set(key, build);
    }
    return build;
  }

  private async buildOnce(request: BuildRequest): Promise<BuildResult> {
    const hasDockerfile = existsSync(path.join(request.contextDir, 'Dockerfile'));
    if (request.dockerImage && (!request.force || !hasDockerfile)) {
      if (await this.imageLabels(request.dockerImage)) return { image: request.dockerImage, built: false };
      if (!hasDockerfile) {
        await this.pull(request.dockerImage);
        return { image: request.dockerImage, built: false };
      }
    }
    if (!hasDockerfile) {
      throw new TaskEnvironmentError('EnvironmentBuildError', `${request.contextDir}/Dockerfile: missing`);
    }
    const tag = imageTag(request.envKey);
    const labels = await this.imageLabels(tag);
    // force_build rebuilds once per job: an image this job already built is fresh enough.
    if (labels && (!request.force || labels[LABEL_JOB] === request.jobName)) return { image: tag, built: true };

    const timeout = AbortSignal.timeout(request.timeoutMs);
    const signal = request.signal ? AbortSignal.any([request.signal, timeout]) : timeout;
    const output: string[] = [];
    const record = (text: string) => {
      for (const line of text.split('\n')) {
        if (!line.trim()) continue;
        output.push(line);
        if (output.length > BUILD_OUTPUT_LINES) output.shift();
        request.onOutput?.(line);
      }
    };
    let failure: string | undefined;
    try {
      const stream = await this.docker.buildImage(packed(request.contextDir), {
        t: tag,
        labels: { [LABEL_JOB]: request.jobName, [LABEL_ENV_KEY]: request.envKey },
        forcerm: true,
        abortSignal: signal,
      } as Docker.ImageBuildOptions);
      await new Promise<void>((resolve, reject) => {
        this.docker.modem.followProgress(
          stream,
          (err) => (err ? reject(err) : resolve()),
          (event: { stream?: string; error?: string; errorDetail?: { message?: string } }) => {
            if (event.stream) record(event.stream);
            if (event.error) failure = event.errorDetail?.message ?? event.error;
          }
        );
      });
    } catch (err) {
      if (timeout.aborted) {
        throw new TaskEnvironmentError(
          'EnvironmentBuildError',
          `build exceeded ${request.timeoutMs / 1000} s\n${output.join('\n')}`
        );
      }
      throw err;
    }
    if (failure) throw new TaskEnvironmentError('EnvironmentBuildError', `${output.join('\n')}\n${failure}`.trim());
    return { image: tag, built: true };
  }

  private async pull(image: string): Promise<void> {
    try {
      const stream = await this.docker.pull(image);
      await new Promise<void>((resolve, reject) =>
        this.docker.modem.followProgress(stream, (err) => (err ? reject(err) : resolve()))
      );
    } catch (err) {
      throw new TaskEnvironmentError(
        'EnvironmentBuildError',
        `docker_image ${image} is not on this host and could not be pulled: ${firstLine(err)}`
      );
    }
  }

  private async imageLabels(image: string): Promise<Record<string, string> | undefined> {
    try {
      const info = await this.docker.getImage(image).inspect();
      return info.Config?.Labels ?? {};
    } catch (err) {
      if (statusCode(err) === 404) return undefined;
      throw err;
    }
  }

  async start(request: StartRequest): Promise<StartResult> {
    await this.removeTrial(request.trialId);
    const image = await this.docker.getImage(request.image).inspect();
    const workdir = request.workdir ?? (image.Config?.WorkingDir || '/');
    const options: Docker.ContainerCreateOptions = {
      name: containerName(request.trialName, request.trialId),
      Image: request.image,
      // PID 1 only keeps the container alive; killing every other process (agent timeout) leaves it standing.
      Entrypoint: ['sleep', 'infinity'],
      Cmd: [],
      WorkingDir: workdir,
      Env: Object.entries(request.env).map(([key, value]) => `${key}=${value}`),
      Labels: {
        [LABEL_JOB]: request.jobName,
        [LABEL_TRIAL]: request.trialId,
        [LABEL_HOST]: request.hostId || this.hostId,
      },
      HostConfig: {
        NanoCpus: Math.round(request.resources.cpus * 1e9),
        Memory: Math.round(request.resources.memoryBytes),
        MemorySwap: Math.round(request.resources.memoryBytes),
      },
    };
    const unenforced: string[] = [];
    let container: Docker.Container;
    try {
      container = await this.docker.createContainer({
        ...options,
        HostConfig: { ...options.HostConfig, StorageOpt: { size: `${Math.round(request.resources.storageBytes)}` } },
      });
    } catch (err) {
      // Most storage drivers (overlay2 without project quotas) cannot limit a container's disk.
      if (!/storage ?opt|quota|backing filesystem/i.test(firstLine(err))) throw err;
      unenforced.push('storage');
      container = await this.docker.createContainer(options);
    }
    await container.start();
    const handle = { id: container.id, workdir };
    const prepared = await this.exec(handle, { command: 'mkdir -p /logs/agent /logs/verifier', user: '0' });
    if (prepared.exitCode !== 0) {
      throw new TaskEnvironmentError(
        'EnvironmentStartError',
        `could not create /logs in the container: ${prepared.stderr.trim()}`
      );
    }
    return { handle, unenforced };
  }

  async exec(handle: EnvironmentHandle, request: ExecRequest): Promise<ExecResult> {
    const container = this.docker.getContainer(handle.id);
    const exec = await container.exec({
      Cmd: [
        '/bin/sh',
        '-c',
        `if command -v bash >/dev/null 2>&1; then exec bash -c "$0"; else exec sh -c "$0"; fi`,
        request.command,
      ],
      Env: Object.entries(request.env ?? {}).map(([key, value]) => `${key}=${value}`),
      WorkingDir: request.cwd ?? handle.workdir,
      User: request.user,
      AttachStdout: true,
      AttachStderr: true,
    });
    const stream = await exec.start({ hijack: true, stdin: false });
    const stdout = new TailBuffer();
    const stderr = new TailBuffer();
    this.docker.modem.demuxStream(stream, stdout.sink(), stderr.sink());
    const ended = new Promise<void>((resolve) => {
      stream.once('end', resolve);
      stream.once('close', resolve);
      stream.once('error', () => resolve());
    });

    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<'timeout'>((resolve) => {
      if (request.timeoutMs) timer = setTimeout(() => resolve('timeout'), request.timeoutMs);
    });
    const aborted = new Promise<'abort'>((resolve) => {
      if (request.signal?.aborted) resolve('abort');
      request.signal?.addEventListener('abort', () => resolve('abort'), { once: true });
    });
    try {
      const outcome = await Promise.race([ended.then(() => 'ended' as const), timedOut, aborted]);
      if (outcome !== 'ended') {
        stream.destroy();
        await this.killAll(handle);
        if (outcome === 'abort') throw request.signal?.reason ?? new Error('aborted');
        return { exitCode: null, stdout: stdout.text(), stderr: stderr.text(), timedOut: true };
      }
      const info = await exec.inspect();
      return { exitCode: info.ExitCode ?? null, stdout: stdout.text(), stderr: stderr.text(), timedOut: false };
    } finally {
      clearTimeout(timer);
    }
  }

  /** Kills every process in the container but PID 1: whatever an agent started, daemons included. */
  private async killAll(handle: EnvironmentHandle): Promise<void> {
    const exec = await this.docker.getContainer(handle.id).exec({
      Cmd: ['/bin/sh', '-c', 'kill -9 -1 2>/dev/null; true'],
      User: '0',
      AttachStdout: true,
      AttachStderr: true,
    });
    const stream = await exec.start({ hijack: true, stdin: false });
    stream.resume();
    await new Promise<void>((resolve) => {
      stream.once('end', resolve);
      stream.once('close', resolve);
      stream.once('error', () => resolve());
    });
  }

  /** A folder's contents land inside containerPath; a single file lands as containerPath/<its name>. */
  async upload(handle: EnvironmentHandle, hostPath: string, containerPath: string): Promise<void> {
    const made = await this.exec(handle, { command: `mkdir -p '${containerPath.replace(/'/g, `'\\''`)}'`, user: '0' });
    if (made.exitCode !== 0) throw new Error(`mkdir ${containerPath} in the container failed: ${made.stderr.trim()}`);
    const info = await lstat(hostPath);
    const archive = info.isDirectory() ? packed(hostPath) : packed(path.dirname(hostPath), [path.basename(hostPath)]);
    await this.docker.getContainer(handle.id).putArchive(archive, { path: containerPath });
  }

  async download(handle: EnvironmentHandle, containerPath: string, hostDir: string): Promise<void> {
    let archive: NodeJS.ReadableStream;
    try {
      archive = await this.docker.getContainer(handle.id).getArchive({ path: containerPath });
    } catch (err) {
      if (statusCode(err) === 404) return;
      throw err;
    }
    await mkdir(hostDir, { recursive: true });
    await extractSafely(archive as Readable, hostDir);
  }

  async stop(handle: EnvironmentHandle): Promise<void> {
    try {
      // Logs are collected by now and PID 1 (sleep) ignores SIGTERM: no grace period to wait out.
      await this.docker.getContainer(handle.id).stop({ t: 0 });
    } catch (err) {
      if (![304, 404].includes(statusCode(err) ?? 0)) throw err;
    }
  }

  async remove(handle: EnvironmentHandle): Promise<void> {
    try {
      await this.docker.getContainer(handle.id).remove({ force: true, v: true });
    } catch (err) {
      if (![404, 409].includes(statusCode(err) ?? 0)) throw err;
    }
  }

  async removeTrial(trialId: string): Promise<number> {
    const containers = await this.docker.listContainers({
      all: true,
      filters: { label: [`${LABEL_TRIAL}=${trialId}`] },
    });
    for (const container of containers) await this.remove({ id: container.Id, workdir: '/' });
    return containers.length;
  }

  async removeImage(image: string): Promise<boolean> {
    try {
      await this.docker.getImage(image).remove();
      return true;
    } catch (err) {
      const code = statusCode(err);
      if (code === 404) return true;
      if (code === 409) return false;
      throw err;
    }
  }
}

/**
 * Extracts a `docker cp`-style archive of one folder into hostDir, dropping the folder's own name. Only regular files
 * and folders are written; links and devices are skipped; an entry that would land outside hostDir is refused; an
 * existing link on the host is replaced, never followed.
 */
async function extractSafely(archive: Readable, hostDir: string): Promise<void> {
  const root = path.resolve(hostDir);
  const extract = tarStream.extract();
  archive.pipe(extract);
  for await (const entry of extract) {
    const { header } = entry;
    const relative = header.name.split('/').slice(1).join('/');
    const target = path.resolve(root, relative);
    const inside = target === root || target.startsWith(root + path.sep);
    if (!relative || !inside || (header.type !== 'file' && header.type !== 'directory')) {
      entry.resume();
      continue;
    }
    if (header.type === 'directory') {
      await replaceLink(target);
      await mkdir(target, { recursive: true });
      entry.resume();
      continue;
    }
    await mkdir(path.dirname(target), { recursive: true });
    await replaceLink(target);
    const file = await open(
      target,
      constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC | constants.O_NOFOLLOW,
      0o644
    );
    try {
      for await (const chunk of entry) await file.write(chunk as Buffer);
    } finally {
      await file.close();
    }
  }
}

async function replaceLink(target: string): Promise<void> {
  const info = await lstat(target).catch(() => undefined);
  if (info?.isSymbolicLink()) await rm(target);
}

/** Keeps the last OUTPUT_LIMIT bytes of a stream. */
class TailBuffer {
  private data = '';

  sink(): PassThrough {
    const sink = new PassThrough();
    sink.on('data', (chunk: Buffer) => {
      this.data += chunk.toString();
      if (this.data.length > OUTPUT_LIMIT) this.data = this.data.slice(-OUTPUT_LIMIT);
    });
    return sink;
  }

  text(): string {
    return this.data;
  }
}

/** A tar of a host folder (or of some entries of it), as the Docker API takes it. */
function packed(dir: string, entries?: string[]): NodeJS.ReadableStream {
  // tar-fs streams are streamx streams: pipe-compatible with Node's, which is all dockerode does with them.
  return tarFs.pack(dir, entries ? { entries } : undefined) as unknown as NodeJS.ReadableStream;
}

export function imageTag(envKey: string): string {
  return `${IMAGE_REPOSITORY}:${envKey}`;
}

function containerName(trialName: string, trialId: string): string {
  const digest = createHash('sha256').update(trialId).digest('hex').slice(0, 8);
  return `rollout-${trialName.replace(/[^A-Za-z0-9_.-]/g, '_').slice(0, 40)}-${digest}`;
}

function statusCode(err: unknown): number | undefined {
  return (err as { statusCode?: number }).statusCode;
}

function firstLine(err: unknown): string {
  return (err instanceof Error ? err.message : String(err)).split('\n')[0] ?? '';
}
