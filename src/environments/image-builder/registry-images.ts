/**
 * Images for environments that pull from a registry (kubernetes pods, Fly machines): a task's docker_image as is
 * (the platform pulls it); else built by the shared image builder on this worker's Docker engine and pushed under its
 * content key to the provider's registry (the worker's Docker must be logged in to it).
 */
import { runCommand } from '../cli-command';
import { hasDockerfileIn } from '../dockerfile';
import type { BuildRequest, BuildResult, ProviderSettings } from '../../contracts/environment';
import { OutputTail } from '../exec-output';
import type { ImageBuilder } from './builder';

export class RegistryImages {
  /**
   * `remoteImage` names the image of an env key in the provider's registry under a job's settings, or throws a
   * TaskEnvironmentError saying how to name a registry.
   */
  constructor(
    private readonly builder: ImageBuilder,
    private readonly remoteImage: (settings: ProviderSettings | undefined, envKey: string) => string
  ) {}

  /**
   * A task's docker_image is used as is (the platform pulls it). Otherwise the environment is built here as for
   * docker and pushed under its content hash to the registry, unless the registry has that tag already.
   * The registry's images are shared by every job and never deleted by Rollout, so none is `built` for release.
   */
  async build(request: BuildRequest): Promise<BuildResult> {
    return { image: (await this.prebuild(request)).image, built: false };
  }

  /** `rollout build`: as build; `fresh` when it was pushed now (not in the registry before). */
  async prebuild(request: BuildRequest): Promise<{ image: string; fresh: boolean }> {
    const hasDockerfile = await hasDockerfileIn(request.contextDir);
    if (request.dockerImage && !hasDockerfile) return { image: request.dockerImage, fresh: false };
    const remote = this.remoteImage(request.settings, request.envKey);
    if (!request.force && (await this.registryHas(remote, request))) return { image: remote, fresh: false };
    const local = await this.builder.build(request);
    try {
      await this.dockerCli(['tag', local.image, remote], request);
      await this.dockerCli(['push', remote], request);
    } finally {
      if (local.built) await this.builder.removeImage(local.image);
    }
    return { image: remote, fresh: true };
  }

  /** Whether the registry holds the tag (asked through the docker CLI, with the worker's registry credentials). */
  private async registryHas(image: string, request: BuildRequest): Promise<boolean> {
    const exitCode = await runCommand('docker', ['manifest', 'inspect', '--insecure', image], {
      signal: request.signal ?? AbortSignal.timeout(request.timeoutMs),
      env: {},
      onOutput: () => undefined,
    });
    return exitCode === 0;
  }

  private async dockerCli(args: string[], request: BuildRequest): Promise<void> {
    const output = new OutputTail();
    const exitCode = await runCommand('docker', args, {
      signal: request.signal ?? AbortSignal.timeout(request.timeoutMs),
      env: {},
      onOutput: (text) => {
        output.write(text);
        for (const line of text.split('\n')) if (line.trim()) request.onOutput?.(line);
      },
    });
    request.signal?.throwIfAborted();
    // The registry refused or could not be reached: not the task's fault, so retried (and the trial restarted).
    if (exitCode !== 0) throw new Error(`docker ${args[0]} ${args.at(-1)} failed: ${output.text().trim()}`);
  }
}
