/** Copies between the host and a trial's container, through the daemon's archive API. */
import path from 'node:path';

import type Docker from 'dockerode';

import type { EnvironmentHandle } from '../../contracts/trial';
import { packedUpload } from '../archives';
import type { CollectBudget } from '../host-files';
import type { FolderSelection } from '../../contracts/environment';
import { extractArchive } from '../host-files';
import { daemonMessage, statusCode } from './engine';

export class DockerFiles {
  constructor(private readonly docker: Docker) {}

  /**
   * A folder's contents land inside containerPath; a single file lands as containerPath/<its name>. One archive,
   * extracted at the container's root with every entry under its target, so the daemon makes missing folders (no
   * `mkdir` exec first) and several targets take one transfer.
   */
  async upload(handle: EnvironmentHandle, hostPath: string, containerPath: string | readonly string[]): Promise<void> {
    const { archive } = await packedUpload(hostPath, containerPath);
    await this.docker.getContainer(handle.id).putArchive(archive, { path: '/' });
  }

  /** See extractArchive: the contents of a folder land in hostDir; links and `../` escapes are skipped. */
  async download(
    handle: EnvironmentHandle,
    containerPath: string,
    hostDir: string,
    budget?: CollectBudget
  ): Promise<void> {
    const archive = await this.archiveOf(handle, containerPath);
    if (archive) await extractArchive(archive, hostDir, budget, path.posix.basename(containerPath));
  }

  /** One archive for several folders: each getArchive costs the daemon a process of its own (tens of CPU-ms). */
  async downloadFolders(
    handle: EnvironmentHandle,
    containerPath: string,
    selection: FolderSelection,
    hostDir: string,
    budget?: CollectBudget
  ): Promise<boolean> {
    const archive = await this.archiveOf(handle, containerPath);
    return archive ? extractArchive(archive, hostDir, budget, '', selection) : true;
  }

  /** The archive of containerPath; undefined when nothing is there (the agent wrote no logs). */
  private async archiveOf(
    handle: EnvironmentHandle,
    containerPath: string
  ): Promise<NodeJS.ReadableStream | undefined> {
    try {
      return await this.docker.getContainer(handle.id).getArchive({ path: containerPath });
    } catch (err) {
      // Nothing at containerPath is normal; a missing container is not.
      if (statusCode(err) === 404 && !/no such container/i.test(daemonMessage(err))) return undefined;
      throw err;
    }
  }
}
