/**
 * Files in and out of an E2B sandbox: tar over the sandbox's exec (../kit/tar-transfer.ts), each archive staged as a
 * file through envd's file endpoints.
 */
import { Readable } from 'node:stream';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';

import type { EnvironmentHandle } from '../../contracts/trial';
import type { StagedCarrier } from '../kit/tar-transfer';
import { StagedTransfer } from '../kit/tar-transfer';
import type { SandboxCommands } from './exec';
import type { Sandbox } from './client';

export function sandboxFiles(
  sandboxOf: (handle: EnvironmentHandle) => Promise<Sandbox>,
  commands: SandboxCommands
): StagedTransfer {
  return new StagedTransfer((handle: EnvironmentHandle): StagedCarrier => ({
    where: `sandbox ${handle.id}`,
    run: async (script) => {
      const { exitCode, stderr } = await commands.exec(handle, { command: script, cwd: '/' });
      return { exitCode, output: stderr };
    },
    put: async (file, archive) => {
      const sandbox = await sandboxOf(handle);
      await sandbox.files.write(file, await collect(archive), { user: 'root', useOctetStream: true });
    },
    get: async (file) => {
      const sandbox = await sandboxOf(handle);
      const stream = await sandbox.files.read(file, { user: 'root', format: 'stream' });
      return Readable.fromWeb(stream as WebReadableStream<Uint8Array>);
    },
  }));
}

/** A stream's bytes, as the SDK's write takes them (an ArrayBuffer of their own). */
async function collect(stream: Readable): Promise<ArrayBuffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(chunk as Buffer);
  return new Uint8Array(Buffer.concat(chunks)).buffer;
}
