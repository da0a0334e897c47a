/**
 * Copies in and out of a Daytona sandbox: one tar archive each way, moved by the toolbox's file API and packed or
 * unpacked in the sandbox by tar (modes kept, one transfer however many files), as the kubernetes provider does over
 * its exec.
 */
import { randomUUID } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import path from 'node:path';
import type { Readable } from 'node:stream';

import { shellQuote } from '../../shell';
import type { EnvironmentHandle } from '../../contracts/trial';
import { packedAt, rootRelative } from '../archives';
import type { CollectBudget } from '../host-files';
import { extractArchive } from '../host-files';
import { withHostCopy } from '../cloud/host-copy';
import type { DaytonaClients } from './client';
import { daytonaCall } from './client';
import type { SandboxExec } from './exec';

export class SandboxFiles {
  constructor(
    private readonly clients: DaytonaClients,
    private readonly execs: SandboxExec
  ) {}

  /** A folder's contents land inside each containerPath; a single file lands as containerPath/<its name>. */
  async upload(handle: EnvironmentHandle, hostPath: string, containerPath: string | readonly string[]): Promise<void> {
    const targets = typeof containerPath === 'string' ? [containerPath] : containerPath;
    const isFolder = (await stat(hostPath)).isDirectory();
    await this.extractAtRoot(
      handle,
      packedAt(hostPath, isFolder, targets),
      targets.map((target) => `/${rootRelative(target)}`)
    );
  }

  /** Extracts an archive at the sandbox's root (its folders `dirs` made first, for empty uploads). */
  async extractAtRoot(handle: EnvironmentHandle, archive: Readable, dirs: readonly string[] = []): Promise<void> {
    const sandbox = await this.clients.sandbox(handle.id);
    const file = `/tmp/rollout-upload-${randomUUID()}.tar`;
    // Kept on the host while it goes, so a rate-limited upload is sent again whole (a stream goes once).
    await withHostCopy(archive, (hostFile) =>
      daytonaCall(() => sandbox.fs.uploadFileStream(createReadStream(hostFile), file))
    );
    const made = dirs.length ? `mkdir -p ${dirs.map(shellQuote).join(' ')} && ` : '';
    const { exitCode, output } = await this.execs.root(
      handle.id,
      `${made}tar -xmf ${file} -C / ; code=$?; rm -f ${file}; exit $code`
    );
    if (exitCode !== 0)
      throw new Error(`upload to ${dirs.join(', ') || '/'} failed in the sandbox (exit ${exitCode}): ${output.trim()}`);
  }

  /** See extractArchive: the contents of a folder land in hostDir; links and `../` escapes are skipped. */
  async download(
    handle: EnvironmentHandle,
    containerPath: string,
    hostDir: string,
    budget?: CollectBudget
  ): Promise<void> {
    const file = `/tmp/rollout-download-${randomUUID()}.tar`;
    const base = path.posix.basename(containerPath);
    const packed = await this.execs.root(
      handle.id,
      // 3: nothing there (the agent wrote no logs), which is normal.
      `test -e ${shellQuote(containerPath)} || exit 3; ` +
        `tar -cf ${file} -C ${shellQuote(path.posix.dirname(containerPath))} ${shellQuote(base)}`
    );
    if (packed.exitCode === 3) return;
    try {
      if (packed.exitCode !== 0) {
        throw new Error(
          `download of ${containerPath} failed in the sandbox (exit ${packed.exitCode}): ${packed.output.trim()}`
        );
      }
      const sandbox = await this.clients.sandbox(handle.id);
      const archive = await daytonaCall(() => sandbox.fs.downloadFileStream(file));
      await extractArchive(archive, hostDir, budget, base);
    } finally {
      await this.execs.root(handle.id, `rm -f ${file}`);
    }
  }
}
