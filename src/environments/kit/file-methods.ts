/**
 * The file methods of an environment whose files all go through one transfer object (the kit's tar transfers,
 * Docker's archive API, Fly's pieces): a provider extends this and keeps only what is its own.
 */
import type { CollectBudget, Environment, FolderSelection } from '../../contracts/environment';
import type { EnvironmentHandle } from '../../contracts/trial';

export type EnvironmentFiles = Required<Pick<Environment, 'upload' | 'download' | 'downloadFolders'>>;

export abstract class FilesThroughTransfer implements EnvironmentFiles {
  protected abstract readonly files: EnvironmentFiles;

  upload(handle: EnvironmentHandle, hostPath: string, containerPath: string | readonly string[]): Promise<void> {
    return this.files.upload(handle, hostPath, containerPath);
  }

  download(handle: EnvironmentHandle, containerPath: string, hostDir: string, budget?: CollectBudget): Promise<void> {
    return this.files.download(handle, containerPath, hostDir, budget);
  }

  downloadFolders(
    handle: EnvironmentHandle,
    containerPath: string,
    selection: FolderSelection,
    hostDir: string,
    budget?: CollectBudget
  ): Promise<boolean> {
    return this.files.downloadFolders(handle, containerPath, selection, hostDir, budget);
  }
}
