/** Files in and out of a Modal sandbox: tar over the exec's stdin and stdout (../kit/tar-transfer.ts). */
import { StreamedTransfer } from '../kit/tar-transfer';
import type { SandboxExec } from './exec';

export function sandboxFiles(execs: SandboxExec): StreamedTransfer {
  return new StreamedTransfer((handle) => ({
    where: 'the modal sandbox',
    run: (script, io) => execs.runScript(handle, script, io),
  }));
}
