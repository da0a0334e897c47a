/** Checks on the real Docker engine: what Rollout left behind. */
import { networkInterfaces } from 'node:os';

import Docker from 'dockerode';

import { DockerNetwork } from '../../src/environments/docker/network';

import { LABEL_JOB } from '../../src/contracts/environment';

/** A client per call: it reads DOCKER_HOST then, so a test that moves to a private daemon is followed. */
const engine = (): Docker => new Docker();

export async function containersOfJob(jobName: string): Promise<Docker.ContainerInfo[]> {
  return engine().listContainers({ all: true, filters: { label: [`${LABEL_JOB}=${jobName}`] } });
}

export async function imagesOfJob(jobName: string): Promise<Docker.ImageInfo[]> {
  return engine().listImages({ filters: { label: [`${LABEL_JOB}=${jobName}`] } });
}

/** An image's tags, or undefined when there is no such image. */
export async function imageById(id: string): Promise<{ RepoTags?: string[] } | undefined> {
  return engine()
    .getImage(id)
    .inspect()
    .catch((err: Error & { statusCode?: number }) => {
      if (err.statusCode === 404) return undefined;
      throw err;
    });
}

export async function removeJobLeftovers(jobName: string): Promise<void> {
  for (const container of await containersOfJob(jobName)) {
    await engine().getContainer(container.Id).remove({ force: true });
  }
  // Not forced: on a shared host another job may be using an image this job built (images are content-keyed);
  // the daemon refuses (409) while a container uses it, and that image is then left to its user.
  for (const image of await imagesOfJob(jobName)) {
    await engine()
      .getImage(image.Id)
      .remove()
      .catch((err: Error & { statusCode?: number }) => {
        if (err.statusCode !== 404 && err.statusCode !== 409) throw err;
      });
  }
}

/** The host's address as containers on the default bridge network see it (where a test's servers listen). */
export async function dockerHostAddress(): Promise<string> {
  const gateway = await new DockerNetwork(engine()).gatewayHost().catch(() => null);
  if (gateway) return gateway;
  const docker0 = networkInterfaces().docker0?.find((address) => address.family === 'IPv4');
  if (!docker0) throw new Error('cannot tell the host address containers reach: no bridge gateway and no docker0');
  return docker0.address;
}
