/**
 * Files in and out of an E2B sandbox: a tar through envd's file endpoints (one upload or download however many
 * files), packed or unpacked by `tar` in the sandbox, and on the host by the same code as Docker's copies.
 */
import { randomBytes } from 'node:crypto';
import { stat } from 'node:fs/promises';
import path from 'node:path';
import { Readable } from 'node:stream';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';

import { shellQuote } from '../../shell';
import type { EnvironmentHandle } from '../../contracts/trial';
import { packedAt } from '../archives';
import type { CollectBudget } from '../host-files';
import { extractArchive } from '../host-files';
import type { SandboxCommands } from './commands';
import type { Sandbox } from './sdk';

export class SandboxFiles {
  constructor(
    private readonly sandboxOf: (handle: EnvironmentHandle) => Promise<Sandbox>,
    private readonly commands: SandboxCommands
  ) {}

  /** A folder's contents land inside each containerPath; a single file lands as containerPath/<its name>. */
  async upload(handle: EnvironmentHandle, hostPath: string, containerPath: string | readonly string[]): Promise<void> {
    const isFolder = (await stat(hostPath)).isDirectory();
    const targets = typeof containerPath === 'string' ? [containerPath] : containerPath;
    await this.extractAtRoot(handle, packedAt(hostPath, isFolder, targets), `upload to ${targets.join(', ')}`);
  }

  /** Writes a tar to the sandbox and extracts it at its root, as root. */
  async extractAtRoot(handle: EnvironmentHandle, archive: Readable, what: string): Promise<void> {
    const sandbox = await this.sandboxOf(handle);
    const file = scratchFile();
    await sandbox.files.write(file, await collect(archive), { user: 'root', useOctetStream: true });
    const extracted = await this.commands.exec(handle, {
      command: `tar -xmf ${file} -C / ; s=$?; rm -f ${file}; exit $s`,
      cwd: '/',
    });
    if (extracted.exitCode !== 0) {
      throw new Error(
        `${what} failed in sandbox ${handle.id} (exit ${extracted.exitCode}): ${extracted.stderr.trim()}`
      );
    }
  }

  /** See extractArchive: the contents of a folder land in hostDir; links and `../` escapes are skipped. */
  async download(
    handle: EnvironmentHandle,
    containerPath: string,
    hostDir: string,
    budget?: CollectBudget
  ): Promise<void> {
    const file = scratchFile();
    const name = path.posix.basename(containerPath);
    const packed = await this.commands.exec(handle, {
      command: [
        // Nothing there (the agent wrote no logs) is normal: nothing to download.
        `[ -e ${shellQuote(containerPath)} ] || exit 3`,
        `tar -cf ${file} -C ${shellQuote(path.posix.dirname(containerPath))} ${shellQuote(name)}`,
      ].join('; '),
      cwd: '/',
    });
    if (packed.exitCode === 3) return;
    try {
      if (packed.exitCode !== 0) {
        throw new Error(
          `download of ${containerPath} failed in sandbox ${handle.id} (exit ${packed.exitCode}): ${packed.stderr.trim()}`
        );
      }
      const sandbox = await this.sandboxOf(handle);
      const stream = await sandbox.files.read(file, { user: 'root', format: 'stream' });
      await extractArchive(Readable.fromWeb(stream as WebReadableStream<Uint8Array>), hostDir, budget, name);
    } finally {
      await this.commands.exec(handle, { command: `rm -f ${file}`, cwd: '/' });
    }
  }
}

function scratchFile(): string {
  return `/tmp/.rollout-${randomBytes(8).toString('hex')}.tar`;
}

/** A stream's bytes, as the SDK's write takes them (an ArrayBuffer of their own). */
async function collect(stream: Readable): Promise<ArrayBuffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(chunk as Buffer);
  return new Uint8Array(Buffer.concat(chunks)).buffer;
}
