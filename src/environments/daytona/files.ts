/**
 * Copies in and out of a Daytona sandbox: tar over the sandbox's exec (../kit/tar-transfer.ts), each archive staged
 * as a file moved by the toolbox's file API.
 */
import { createReadStream } from 'node:fs';

import type { EnvironmentHandle } from '../../contracts/trial';
import { withHostCopy } from '../kit/host-copy';
import type { StagedCarrier } from '../kit/tar-transfer';
import { StagedTransfer } from '../kit/tar-transfer';
import type { DaytonaClients } from './client';
import { daytonaCall } from './client';
import type { SandboxExec } from './exec';

export function sandboxFiles(clients: DaytonaClients, execs: SandboxExec): StagedTransfer {
  return new StagedTransfer((handle: EnvironmentHandle): StagedCarrier => ({
    where: 'the sandbox',
    run: (script) => execs.root(handle.id, script),
    put: async (file, archive) => {
      const sandbox = await clients.sandbox(handle.id);
      // Kept on the host while it goes, so a rate-limited upload is sent again whole (a stream goes once).
      await withHostCopy(archive, (hostFile) =>
        daytonaCall(() => sandbox.fs.uploadFileStream(createReadStream(hostFile), file))
      );
    },
    get: async (file) => {
      const sandbox = await clients.sandbox(handle.id);
      return daytonaCall(() => sandbox.fs.downloadFileStream(file));
    },
  }));
}
