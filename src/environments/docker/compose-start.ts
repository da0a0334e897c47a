/** A trial whose task has a docker-compose.yaml: its compose project, and the containers of its other services. */
import path from 'node:path';

import type { EnvironmentHandle } from '../../contracts/trial';
import { hasDockerfileIn } from '../dockerfile';
import type { StartRequest } from '../../contracts/environment';
import { TaskEnvironmentError } from '../../contracts/environment';
import { imageTag } from '../image-builder/builder';
import type { DockerEngine } from './engine';
import type { DockerCleanup } from './cleanup';
import { LABEL_COMPOSE_PROJECT, composeInfra, composeUp, projectName, serviceFilter } from './compose';

/** How long sidecars may take to become healthy (their own healthcheck's retries usually end it sooner). */
const COMPOSE_WAIT_TIMEOUT_SEC = 300;

export class ComposeStart {
  constructor(
    private readonly engine: DockerEngine,
    private readonly cleanup: DockerCleanup
  ) {}

  /**
   * A compose project for the trial: its `main` service is the trial's container, every service healthy before
   * this returns; returns main's container id. Whatever a failed start left is removed.
   */
  async start(
    request: StartRequest,
    composeFile: string,
    main: Record<string, unknown>,
    labels: Record<string, string>
  ): Promise<string> {
    const project = projectName(request.trialName, request.trialId);
    try {
      const environmentDir = path.dirname(composeFile);
      const infra = await composeInfra(composeFile, {
        contextDir: environmentDir,
        mainImage: request.image,
        prebuilt: !(await hasDockerfileIn(environmentDir)),
        cpus: request.resources.cpus,
        memoryBytes: request.resources.memoryBytes,
        // The task's [environment.env], not Rollout's own variables (the instruction).
        taskEnv: Object.fromEntries(Object.entries(request.env).filter(([name]) => !name.startsWith('ROLLOUT_'))),
      });
      await composeUp(
        {
          composeFile,
          project,
          main,
          mainImageTag: imageTag(request.envKey ?? ''),
          limits: {
            cpus: request.resources.cpus,
            memoryBytes: request.resources.memoryBytes,
            pidsLimit: request.resources.pidsLimit,
          },
          labels,
          waitTimeoutSec: COMPOSE_WAIT_TIMEOUT_SEC,
        },
        {
          dockerHost: this.engine.dockerHost(),
          infra,
          signal: AbortSignal.timeout(COMPOSE_WAIT_TIMEOUT_SEC * 1000 + 60_000),
        }
      );
      const [container] = await this.engine.docker.listContainers({ filters: { label: serviceFilter(project) } });
      if (!container) throw new TaskEnvironmentError('EnvironmentStartError', `compose project ${project}: no main`);
      return container.Id;
    } catch (err) {
      await this.cleanup.removeTrial(request.trialId);
      throw err;
    }
  }

  async service(handle: EnvironmentHandle, name: string): Promise<EnvironmentHandle> {
    const main = await this.engine.docker.getContainer(handle.id).inspect();
    const project = main.Config.Labels?.[LABEL_COMPOSE_PROJECT];
    if (!project)
      throw new TaskEnvironmentError('EnvironmentBrokenError', `no service ${name}: not a compose environment`);
    const [container] = await this.engine.docker.listContainers({
      all: true,
      filters: { label: serviceFilter(project, name) },
    });
    if (!container) throw new TaskEnvironmentError('EnvironmentBrokenError', `no service ${name} in ${project}`);
    return { id: container.Id, workdir: '/' };
  }
}
