/**
 * What the docker provider adds to the shared image builder: the images of a docker-compose.yaml's sidecars (parts
 * of the main image) and install snapshots (images committed over a trial's container after an agent's install).
 */
import { createHash } from 'node:crypto';

import { hasDockerfileIn } from '../dockerfile';
import type { InstallSnapshots } from '../../contracts/environment';
import {
  LABEL_AGENT,
  LABEL_ENV_KEY,
  LABEL_JOB,
  LABEL_PART_OF,
  LABEL_SNAPSHOT_OF,
  TaskEnvironmentError,
} from '../../contracts/environment';
import type { BuildParts } from '../image-builder/builder';
import { imageLabelsOf, imageTag, stepSignal } from '../image-builder/builder';
import type { DockerEngine } from './engine';
import { buildSidecars, composeInfra, taskComposeFile } from './compose';

const SNAPSHOT_REPOSITORY = 'rollout-agent';

/**
 * The images of a docker-compose.yaml's services that have a `build` section, once per environment key (each
 * tagged after the main image's key); rebuilt with force_build.
 */
export function composeParts(engine: DockerEngine): BuildParts {
  return async (request) => {
    const composeFile = await taskComposeFile(request.contextDir);
    if (!composeFile) return;
    const { signal, timeout } = stepSignal(request);
    const mainTag = imageTag(request.envKey);
    try {
      const labels = { ...imageLabelsOf(engine.owner, request), [LABEL_PART_OF]: request.envKey };
      const prebuilt = !!request.dockerImage && !(await hasDockerfileIn(request.contextDir));
      // Only the build sections of this model are used: the trial's limits are not known here (nor needed).
      const infra = await composeInfra(composeFile, {
        contextDir: request.contextDir,
        mainImage: prebuilt ? request.dockerImage! : mainTag,
        prebuilt,
        cpus: 1,
        memoryBytes: 2 ** 30,
      });
      await buildSidecars(composeFile, mainTag, labels, {
        dockerHost: engine.dockerHost(),
        infra,
        signal,
        onOutput: request.onOutput,
        isBuilt: async (image) => {
          const labels = await engine.imageLabels(image);
          return labels !== undefined && (!request.force || labels[LABEL_JOB] === request.jobName);
        },
      });
      await refuseForeignSidecarTags(engine, request.envKey, mainTag);
    } catch (err) {
      request.signal?.throwIfAborted();
      if (timeout.aborted) {
        throw new TaskEnvironmentError('EnvironmentBuildError', `build exceeded ${request.timeoutMs / 1000} s`);
      }
      throw err;
    }
  };
}

/**
 * After a sidecar build: every tag on an image built as part of this environment is one Rollout chose. The compose
 * policy already refuses `build.tags`; this catches any other way a build could re-tag an image of this host (another
 * job's environment, a base image), removes the foreign tag and fails the build.
 */
export async function refuseForeignSidecarTags(engine: DockerEngine, envKey: string, mainTag: string): Promise<void> {
  // Both labels are set by the build's own --label (over any LABEL of a Dockerfile): another environment's image cannot
  // claim to be part of this one and so lose its tags here.
  const label = [`${LABEL_PART_OF}=${envKey}`, `${LABEL_ENV_KEY}=${envKey}`];
  const images = await engine.docker.listImages({ filters: { label } });
  const foreign = images
    .flatMap((image) => image.RepoTags ?? [])
    .filter((tag) => tag !== '<none>:<none>' && !tag.startsWith(`${mainTag}-svc-`));
  if (!foreign.length) return;
  for (const tag of foreign) await engine.docker.getImage(tag).remove({ noprune: true });
  throw new TaskEnvironmentError(
    'EnvironmentBuildError',
    `a sidecar build tagged ${foreign.join(', ')}, which Rollout did not choose (removed: it would replace an image on this host)`
  );
}

/** Install snapshots as images committed from a trial's container, per base image id and install key. */
export function installSnapshots(engine: DockerEngine): InstallSnapshots {
  return {
    find: async (baseImage, key) => {
      const base = await engine.docker.getImage(baseImage).inspect();
      const tag = snapshotTag(base.Id, key);
      return (await engine.imageLabels(tag)) ? tag : null;
    },
    take: async (handle, key, agent) => {
      const container = await engine.docker.getContainer(handle.id).inspect();
      const [repo, tag] = snapshotTag(container.Image, key).split(':') as [string, string];
      await engine.docker.getContainer(handle.id).commit({
        repo,
        tag,
        changes: [`LABEL ${LABEL_SNAPSHOT_OF}=${container.Image} ${LABEL_AGENT}=${agent}`],
      });
      return `${repo}:${tag}`;
    },
  };
}

/** Per base image id and install key: a rebuilt base image never reuses an install made over the old one. */
function snapshotTag(baseImageId: string, key: string): string {
  const digest = createHash('sha256').update(`${baseImageId}\n${key}`).digest('hex').slice(0, 24);
  return `${SNAPSHOT_REPOSITORY}:${digest}`;
}
