/** Copies in and out of a trial's pod: tar over the exec's stdin and stdout (../kit/tar-transfer.ts). */
import { StreamedTransfer } from '../kit/tar-transfer';
import type { PodExec } from './exec';

export function podFiles(execs: PodExec): StreamedTransfer {
  return new StreamedTransfer((handle) => ({
    where: 'the pod',
    run: (script, io) => execs.runScript(handle, script, io),
  }));
}
