/**
 * Images from a task's environment/ folder, built on the worker's Docker engine with BuildKit (or pulled), shared by
 * the providers that build images: the docker provider runs them here, the kubernetes provider pushes them to its
 * registry. Content-keyed (`rollout-env:<env key>`), built once per host however many trials ask at once, and held
 * by per-job reference tags so an image goes with the last job that uses it.
 */
import { createHash } from 'node:crypto';
import { mkdtemp, readFile, rm, symlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { StringDecoder } from 'node:string_decoder';

import { LineTail, runCommand } from '../cli-command';
import { hasDockerfileIn } from '../dockerfile';
import type { BuildRequest, BuildResult, EnvironmentOwner } from '../../contracts/environment';
import {
  LABEL_DEPLOYMENT,
  LABEL_ENV_KEY,
  LABEL_HOST,
  LABEL_JOB,
  LABEL_PART_OF,
  LABEL_SNAPSHOT_OF,
  TaskEnvironmentError,
} from '../../contracts/environment';
import { firstLine } from '../exec-output';
import { log } from '../../log';
import { dockerfileFrontendImage, ensureDockerfileFrontend, frontendNeed } from './dockerfile-frontend';
import { missingFrontendProblem } from './dockerfile-problems';
import type { DockerEngine } from '../docker/engine';
import { abortable, statusCode } from '../docker/engine';

const IMAGE_REPOSITORY = 'rollout-env';
/** Lines of build output kept for the error message of a failed build. */
const BUILD_OUTPUT_LINES = 40;

interface BuildInFlight {
  result: Promise<BuildResult>;
  signal?: AbortSignal;
}

/** One line of the JSON stream of a build or a pull. */
interface ProgressEvent {
  stream?: string;
  error?: string;
  errorDetail?: { message?: string };
}

/** Images built as parts of a main image (a docker-compose.yaml's sidecars), after the main image is there. */
export type BuildParts = (request: BuildRequest) => Promise<void>;

export class ImageBuilder {
  /** Builds in flight by image: concurrent trials of one environment wait for one build. */
  private readonly builds = new Map<string, BuildInFlight>();
  /** The daemon's version (asked once): whether its own Dockerfile frontend has heredocs. */
  private engineVersion: string | undefined;

  constructor(
    private readonly engine: DockerEngine,
    private readonly buildParts?: BuildParts
  ) {}

  /**
   * The image of Rollout's own is returned as the job's reference tag to it (`rollout-env:<key>-<job ref>`): the job
   * starts its containers from it, and the image stays as long as any job still holds a reference (see removeImage).
   */
  async build(request: BuildRequest): Promise<BuildResult> {
    const resolved = await this.sharedBuild(request);
    if (request.partOf || (!resolved.built && !request.referenced)) return { image: resolved.image, built: false };
    // A present docker_image with parts: referenced under the environment's own tag, so removeImage finds its parts.
    const reference = `${resolved.built ? resolved.image : imageTag(request.envKey)}-${this.jobRef(request.jobName)}`;
    const [repo, tag] = splitTag(reference);
    await this.engine.docker.getImage(resolved.image).tag({ repo, tag });
    return { image: reference, built: true };
  }

  /**
   * `rollout build`: the environment's image, built (or pulled) ahead of any job under the builder's name, so no job
   * owns it and `delete: true` never removes it (a job only releases its own reference). `fresh`: it was not here.
   */
  async prebuild(request: BuildRequest): Promise<{ image: string; fresh: boolean }> {
    const hasDockerfile = await hasDockerfileIn(request.contextDir);
    const tag = request.dockerImage && !hasDockerfile ? request.dockerImage : imageTag(request.envKey);
    const existed = (await this.engine.imageLabels(tag)) !== undefined;
    const { image } = await this.sharedBuild(request);
    return { image, fresh: !existed || request.force };
  }

  /** Who holds a reference: a job of this deployment (job names are unique per deployment only). */
  private jobRef(jobName: string, deployment = this.engine.owner.deployment): string {
    return createHash('sha256').update(`${deployment}\n${jobName}`).digest('hex').slice(0, 12);
  }

  /** One build per image at a time: concurrent trials of one environment wait for the same build. */
  private async sharedBuild(request: BuildRequest): Promise<BuildResult> {
    const hasDockerfile = await hasDockerfileIn(request.contextDir);
    const key = request.dockerImage && !hasDockerfile ? request.dockerImage : imageTag(request.envKey);
    for (;;) {
      const inFlight = this.builds.get(key);
      if (!inFlight) {
        const result = this.resolveImage(request, hasDockerfile)
          .then(async (resolved) => {
            await this.buildParts?.(request);
            return resolved;
          })
          .finally(() => this.builds.delete(key));
        this.builds.set(key, { result, signal: request.signal });
        return result;
      }
      try {
        return await abortable(inFlight.result, request.signal);
      } catch (err) {
        // Another trial's build was cancelled: that says nothing about this one, which builds itself.
        if (inFlight.signal?.aborted && !request.signal?.aborted) continue;
        throw err;
      }
    }
  }

  private async resolveImage(request: BuildRequest, hasDockerfile: boolean): Promise<BuildResult> {
    const { dockerImage } = request;
    if (dockerImage && (!request.force || !hasDockerfile) && (await this.engine.imageLabels(dockerImage))) {
      return { image: dockerImage, built: false };
    }
    if (dockerImage && !hasDockerfile) {
      await this.pull(dockerImage, request);
      return { image: dockerImage, built: false };
    }
    if (!hasDockerfile) {
      throw new TaskEnvironmentError(
        'EnvironmentBuildError',
        `${path.join(request.contextDir, 'Dockerfile')}: missing, and the task sets no environment.docker_image`
      );
    }
    const tag = imageTag(request.envKey);
    const labels = await this.engine.imageLabels(tag);
    // force_build rebuilds once per job, not once per trial: an image this job built is fresh enough.
    if (labels && (!request.force || labels[LABEL_JOB] === request.jobName)) return { image: tag, built: true };
    await this.buildImage(request, tag);
    return { image: tag, built: true };
  }

  /**
   * BuildKit, through the docker buildx CLI: real task Dockerfiles use `COPY --chmod` and `RUN --mount=type=cache`,
   * which the engine API's classic builder rejects, and dockerode speaks no BuildKit session.
   */
  private async buildImage(request: BuildRequest, tag: string): Promise<void> {
    const { signal, timeout } = stepSignal(request);
    const output = new LineTail(BUILD_OUTPUT_LINES, request.onOutput);
    const labels = imageLabelsOf(this.engine.owner, request);
    const args = ['buildx', 'build', '--load', '--progress=plain', '--tag', tag];
    for (const [key, value] of Object.entries(labels)) args.push('--label', `${key}=${value}`);
    const frontend = await this.dockerfileFrontend(request);
    // It replaces the engine's own frontend, and a Dockerfile's `# syntax=` line (which would need a registry).
    if (frontend) args.push('--build-arg', `BUILDKIT_SYNTAX=${frontend}`);
    // buildx syncs a context into a folder BuildKit keys by the context folder's *name*, and skips files whose size
    // and mtime match what is there (docker/buildx#3232): after one task's `environment/` (or `tests/`), another's
    // same-named file of the same size and mtime (tasks unpacked from one archive) would be built from the first
    // one's copy. A link named after the content key gives each content a sync folder of its own.
    const links = await mkdtemp(path.join(tmpdir(), 'rollout-context-'));
    const context = path.join(links, `rollout-${request.envKey}`);
    let exitCode: number;
    try {
      await symlink(path.resolve(request.contextDir), context);
      exitCode = await runCommand('docker', [...args, context], {
        signal,
        env: { DOCKER_HOST: this.engine.dockerHost() },
        onOutput: (text) => output.add(text),
      });
    } finally {
      await rm(links, { recursive: true, force: true });
    }
    request.signal?.throwIfAborted();
    if (timeout.aborted) {
      throw new TaskEnvironmentError(
        'EnvironmentBuildError',
        `build exceeded ${request.timeoutMs / 1000} s\n${output.text()}`.trim()
      );
    }
    if (exitCode === 0) return;
    if (/'buildx' is not a docker command|unknown command: docker buildx/.test(output.text())) {
      throw new Error('docker buildx is not installed on this worker (scripts/setup.sh installs it)');
    }
    const needsFrontend = frontend ? null : await missingFrontendProblem(request.contextDir, output.text());
    if (needsFrontend) throw new TaskEnvironmentError('EnvironmentBuildError', needsFrontend);
    throw new TaskEnvironmentError('EnvironmentBuildError', output.text() || `docker buildx build exited ${exitCode}`);
  }

  /**
   * Rollout's Dockerfile frontend image when this Docker host has it, else null; when the Dockerfile needs it (a
   * heredoc before Docker 23, a `# syntax=` line), it is built first (once per host, with a progress line).
   */
  private async dockerfileFrontend(request: BuildRequest): Promise<string | null> {
    const image = dockerfileFrontendImage();
    if (!image || (await this.engine.imageLabels(image))) return image;
    const dockerfile = path.join(request.contextDir, 'Dockerfile');
    this.engineVersion ??= (await this.engine.docker.version()).Version;
    const need = frontendNeed(await readFile(dockerfile, 'utf8'), this.engineVersion);
    if (!need) return null;
    const progress = (line: string) => {
      log.info(`${this.engine.owner.hostId}: ${line}`);
      request.onOutput?.(line);
    };
    progress(`${dockerfile} ${need} needs the Dockerfile frontend ${image}`);
    await ensureDockerfileFrontend(this.engine, image, progress);
    return image;
  }

  private async pull(image: string, request: BuildRequest): Promise<void> {
    const { signal, timeout } = stepSignal(request);
    let failure: string | undefined;
    try {
      const stream = await this.engine.docker.pull(image, { abortSignal: signal });
      await readJsonLines(stream, (event) => {
        if (event.error) failure = event.errorDetail?.message ?? event.error;
      });
    } catch (err) {
      request.signal?.throwIfAborted();
      failure = timeout.aborted ? `pull exceeded ${request.timeoutMs / 1000} s` : firstLine(err);
    }
    if (failure) {
      throw new TaskEnvironmentError(
        'EnvironmentBuildError',
        `docker_image ${image} is not on this host and could not be pulled: ${failure}`
      );
    }
  }

  /**
   * Releases a job's reference tag (what build returned). The image itself goes only when this job built it (its
   * labels name this job and deployment) and no other job holds a reference: a job that keeps its images
   * (`delete: false`) or still runs keeps it, and so does a container still using it (Docker refuses). With the last
   * job reference go the images built as its parts (compose sidecars, a separate verifier's) by jobs of this
   * deployment, whoever built the image itself (a present docker_image, another job's); `rollout build`'s stay.
   */
  async removeImage(reference: string): Promise<boolean> {
    const info = await this.engine.docker
      .getImage(reference)
      .inspect()
      .catch((err: unknown) => {
        if (statusCode(err) === 404) return undefined;
        throw err;
      });
    if (!info) return true;
    const labels = info.Config?.Labels ?? {};
    const base = reference.slice(0, reference.lastIndexOf('-'));
    const builtByThisJob =
      labels[LABEL_JOB] !== undefined &&
      labels[LABEL_DEPLOYMENT] === this.engine.owner.deployment &&
      reference === `${base}-${this.jobRef(labels[LABEL_JOB])}`;
    const otherReferences = (info.RepoTags ?? []).filter((tag) => tag !== reference && tag.startsWith(`${base}-`));
    if (otherReferences.length === 0) {
      const parts = await this.engine.docker.listImages({
        filters: {
          label: [
            `${LABEL_PART_OF}=${base.slice(base.indexOf(':') + 1)}`,
            `${LABEL_DEPLOYMENT}=${this.engine.owner.deployment}`,
          ],
        },
      });
      for (const part of parts) if (!(await this.removeTag(part.Id))) return false;
    }
    const otherTags = (info.RepoTags ?? []).filter((tag) => tag !== reference && tag !== base);
    if (builtByThisJob && otherTags.length === 0) {
      // Its install snapshots (built on top of it) go with it.
      const snapshots = await this.engine.docker.listImages({
        filters: { label: [`${LABEL_SNAPSHOT_OF}=${info.Id}`] },
      });
      for (const snapshot of snapshots) if (!(await this.removeTag(snapshot.Id))) return false;
      // The base tag first: the reference then keeps the image until no container uses it.
      await this.removeTag(base);
    }
    return this.removeTag(reference);
  }

  /** Untags (and deletes the image with its last tag); false when a container still uses the image. */
  private async removeTag(tag: string): Promise<boolean> {
    try {
      await this.engine.docker.getImage(tag).remove();
      return true;
    } catch (err) {
      const code = statusCode(err);
      if (code === 409) return false;
      if (code === 404) return true;
      throw err;
    }
  }
}

/** The labels of an image built for a request: which job, environment and owner (and main image) it belongs to. */
export function imageLabelsOf(owner: EnvironmentOwner, request: BuildRequest): Record<string, string> {
  return {
    [LABEL_JOB]: request.jobName,
    [LABEL_ENV_KEY]: request.envKey,
    [LABEL_HOST]: owner.hostId,
    [LABEL_DEPLOYMENT]: owner.deployment,
    ...(request.partOf ? { [LABEL_PART_OF]: request.partOf } : {}),
  };
}

function splitTag(image: string): [repo: string, tag: string] {
  const colon = image.lastIndexOf(':');
  return [image.slice(0, colon), image.slice(colon + 1)];
}

export function imageTag(envKey: string): string {
  return `${IMAGE_REPOSITORY}:${envKey}`;
}

/** The time limit and cancellation of a build or pull, as one signal, and the time limit alone. */
export function stepSignal(request: BuildRequest): { signal: AbortSignal; timeout: AbortSignal } {
  const timeout = AbortSignal.timeout(request.timeoutMs);
  return { signal: request.signal ? AbortSignal.any([request.signal, timeout]) : timeout, timeout };
}

/** Calls onEvent with each JSON line of a build or pull stream; resolves when the daemon ends it. */
function readJsonLines(stream: NodeJS.ReadableStream, onEvent: (event: ProgressEvent) => void): Promise<void> {
  return new Promise((resolve, reject) => {
    const decoder = new StringDecoder('utf8');
    let pending = '';
    const parse = (line: string) => {
      if (!line.trim()) return;
      let event: ProgressEvent;
      try {
        event = JSON.parse(line) as ProgressEvent;
      } catch {
        event = { stream: line }; // not JSON: keep it as output rather than lose it
      }
      onEvent(event);
    };
    stream.on('data', (chunk: Buffer) => {
      const lines = (pending + decoder.write(chunk)).split('\n');
      pending = lines.pop() ?? '';
      lines.forEach(parse);
    });
    stream.once('error', reject);
    stream.once('end', () => {
      parse(pending + decoder.end());
      resolve();
    });
    stream.once('close', () => reject(new Error('the Docker daemon closed the stream early')));
  });
}
