/** Checks on the real Docker engine: what Rollout left behind. */
import Docker from 'dockerode';

import { LABEL_JOB } from '../../src/environments/environment';

const docker = new Docker();

export async function containersOfJob(jobName: string): Promise<Docker.ContainerInfo[]> {
  return docker.listContainers({ all: true, filters: { label: [`${LABEL_JOB}=${jobName}`] } });
}

export async function imagesOfJob(jobName: string): Promise<Docker.ImageInfo[]> {
  return docker.listImages({ filters: { label: [`${LABEL_JOB}=${jobName}`] } });
}

export async function removeJobLeftovers(jobName: string): Promise<void> {
  for (const container of await containersOfJob(jobName)) {
    await docker.getContainer(container.Id).remove({ force: true });
  }
  for (const image of await imagesOfJob(jobName)) {
    await docker
      .getImage(image.Id)
      .remove({ force: true })
      .catch(() => undefined);
  }
}
