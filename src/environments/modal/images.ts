/**
 * Images of the modal environment, built where Modal builds: a task's Dockerfile as a base image and Dockerfile
 * commands (dockerfile.ts), `docker_image` as a registry image Modal pulls. Modal keys each layer by its definition,
 * so an environment builds once per account and every later job (on any worker) finds it; one build per environment
 * at a time in this process. The result is Modal's image id.
 */
import path from 'node:path';

import type { Image } from 'modal';

import { hasDockerfileIn } from '../dockerfile';
import type { BuildRequest, BuildResult } from '../../contracts/environment';
import { TaskEnvironmentError } from '../../contracts/environment';
import type { ModalConnection } from './client';
import { ifFound } from './client';
import { modalImageRecipe } from './dockerfile';
import { ModalSettingsSchema } from './settings';

/** Modal image ids, as BuildResult.image carries them (anything else is a registry image). */
const IMAGE_ID = /^im-[A-Za-z0-9]+$/;

export class ModalImages {
  private readonly builds = new Map<string, Promise<{ imageId: string; built: boolean }>>();
  /** Environments this process has force-built for a job: force_build rebuilds once per job, not once per trial. */
  private readonly forced = new Set<string>();

  constructor(private readonly connection: ModalConnection) {}

  /** The SDK's Image for what build() returned: a Modal image id, or a registry image (pulled by Modal). */
  async image(image: string): Promise<Image> {
    const { images } = this.connection.client;
    return IMAGE_ID.test(image) ? images.fromId(image) : images.fromRegistry(image);
  }

  /**
   * The job's image: `built` when Modal's builder ran for it in this job (the job then releases it), not when Modal
   * had it already (another job's, or `rollout build`'s, which stay theirs).
   */
  async build(request: BuildRequest): Promise<BuildResult> {
    if (await this.registryImage(request)) return { image: request.dockerImage!, built: false };
    const key = `${request.envKey}\n${request.force ? request.jobName : ''}`;
    let build = this.builds.get(key);
    if (!build) {
      build = this.buildImage(request).finally(() => this.builds.delete(key));
      this.builds.set(key, build);
    }
    const { imageId, built } = await build;
    return { image: imageId, built };
  }

  /** `rollout build`: the image built by Modal ahead of any job (a docker_image pulled into Modal's cache). */
  async prebuild(request: BuildRequest): Promise<{ image: string; fresh: boolean }> {
    if (await this.registryImage(request)) {
      const app = await this.connection.app(ModalSettingsSchema.parse(request.settings ?? {}));
      const image = this.connection.client.images.fromRegistry(request.dockerImage!);
      const { built } = await this.connection.observeBuild(() => image.build(app));
      return { image: request.dockerImage!, fresh: built };
    }
    const { imageId, built } = await this.buildImage(request);
    return { image: imageId, fresh: built };
  }

  /** docker_image is used as it is (Modal pulls it), unless the task has a Dockerfile too and the job forces builds. */
  private async registryImage(request: BuildRequest): Promise<boolean> {
    const hasDockerfile = await hasDockerfileIn(request.contextDir);
    if (!hasDockerfile && !request.dockerImage) {
      throw new TaskEnvironmentError(
        'EnvironmentBuildError',
        `${path.join(request.contextDir, 'Dockerfile')}: missing, and the task sets no environment.docker_image`
      );
    }
    return Boolean(request.dockerImage) && (!hasDockerfile || !request.force);
  }

  /**
   * Releases a job's image: deleted on Modal unless a sandbox of this deployment still runs from it (another job's).
   * A registry image is not Rollout's to delete.
   */
  async remove(image: string, inUse: (imageId: string) => Promise<boolean>): Promise<boolean> {
    if (!IMAGE_ID.test(image)) return true;
    if (await inUse(image)) return false;
    await ifFound(this.connection.client.images.delete(image));
    return true;
  }

  private async buildImage(request: BuildRequest): Promise<{ imageId: string; built: boolean }> {
    const settings = ModalSettingsSchema.parse(request.settings ?? {});
    const recipe = await modalImageRecipe(request.contextDir);
    const forceKey = `${request.jobName}\n${request.envKey}`;
    const forceBuild = request.force && !this.forced.has(forceKey);
    const app = await this.connection.app(settings);
    const image = this.connection.client.images
      .fromRegistry(recipe.baseImage)
      .dockerfileCommands(recipe.commands, { forceBuild });
    request.onOutput?.(`modal: building ${recipe.baseImage} + ${recipe.commands.length} Dockerfile commands`);
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new TaskEnvironmentError('EnvironmentBuildError', `build exceeded ${request.timeoutMs / 1000} s`)),
        request.timeoutMs
      );
    });
    try {
      const { result, built } = await this.connection.observeBuild(() => Promise.race([image.build(app), timedOut]));
      if (forceBuild) this.forced.add(forceKey);
      return { imageId: result.imageId, built };
    } catch (err) {
      // The SDK's messages for a build that failed, timed out or was stopped on Modal: the task's own error.
      if (err instanceof Error && /^Image build for \S+ (failed|timed out|terminated)/.test(err.message)) {
        throw new TaskEnvironmentError('EnvironmentBuildError', err.message);
      }
      throw err;
    } finally {
      clearTimeout(timer);
    }
  }
}
