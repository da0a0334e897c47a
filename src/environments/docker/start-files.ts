/**
 * A start's files into the trial's container (the instruction, a CA bundle), and the setup exec that readies it: each
 * by the cheapest way the daemon allows (see place).
 */
import { createHash, randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chmod, mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import path from 'node:path';

import { shellQuote } from '../../shell';
import { hostCacheDir } from '../../host-cache';
import type { EnvironmentHandle } from '../../contracts/trial';
import { packedFiles } from '../archives';
import type { StartFile } from '../../contracts/environment';
import { TaskEnvironmentError } from '../../contracts/environment';
import type { DockerEngine } from './engine';
import { startScript } from '../kit/prepare';
import type { DockerExec } from './exec';

/** The setup exec's exit code when a bind-mounted start file is not a file in the container. */
const BOUND_FILES_MISSING = 86;
/** A text start file up to this size goes through the setup exec's environment (the kernel allows 128 KiB a value). */
const WRITTEN_FILE_MAX_BYTES = 64 * 1024;

/** How a start's files get into the container (see place). */
export interface FilePlacement {
  bound: { hostPath: string; containerPath: string }[];
  written: { containerPath: string; text: string }[];
  archived: StartFile[];
}

export class StartFiles {
  /** Host files are bind-mounted into containers (see place) until a container did not find them. */
  private bindFiles = true;

  constructor(
    private readonly engine: DockerEngine,
    private readonly execs: DockerExec
  ) {}

  /** The daemon does not see this host's files: from now on they are put in with an archive. */
  cannotBind(): void {
    this.bindFiles = false;
  }

  /**
   * Where a start's files come from. The daemon's archive extraction (it re-executes itself to unpack in the
   * container) costs 50–150 ms per trial, so: a host file is bind-mounted read-only (a content-addressed copy in the
   * host cache, mode 0644) where the daemon is local; a text the size of an instruction is written by the setup exec
   * (passed in its environment); only what is left goes in an archive.
   */
  async place(files: StartFile[]): Promise<FilePlacement> {
    const placement: FilePlacement = { bound: [], written: [], archived: [] };
    const canBind = this.bindFiles && this.engine.daemonAddress().startsWith('/');
    for (const file of files) {
      if ('text' in file && Buffer.byteLength(file.text) <= WRITTEN_FILE_MAX_BYTES && !file.text.includes('\0')) {
        placement.written.push({ containerPath: file.containerPath, text: file.text });
      } else if ('hostPath' in file && canBind) {
        placement.bound.push({ containerPath: file.containerPath, hostPath: await hostCopy(file) });
      } else placement.archived.push(file);
    }
    return placement;
  }

  async put(handle: EnvironmentHandle, files: StartFile[] | undefined): Promise<void> {
    if (!files?.length) return;
    await this.engine.docker.getContainer(handle.id).putArchive(packedFiles(files), { path: '/' });
  }

  /**
   * One exec as root: the start files it writes (and a check that the bound ones are there); /logs/agent and
   * /logs/verifier, writable by whichever user the agent and the tests run as; the caller's setup; and which shell the
   * container has (bash when the image has it, else sh), for later execs. False when a bound file is missing.
   */
  async setUp(
    handle: EnvironmentHandle,
    setup: string | undefined,
    files: Pick<FilePlacement, 'bound' | 'written'>
  ): Promise<boolean> {
    const bound = files.bound.map(({ containerPath }) => shellQuote(containerPath));
    const command = startScript(setup, {
      first: [
        // A bind mount whose source the daemon does not have shows as an empty folder: then the files must be put in.
        ...(bound.length ? [`for f in ${bound.join(' ')}; do [ -f "$f" ] || exit ${BOUND_FILES_MISSING}; done`] : []),
        ...files.written.map(({ containerPath }, index) => {
          const file = shellQuote(containerPath);
          const folder = shellQuote(path.posix.dirname(containerPath));
          return `mkdir -p ${folder} && printf '%s' "$ROLLOUT_START_FILE_${index}" > ${file} && chmod 644 ${file}`;
        }),
      ],
      last: ['if [ -x /bin/bash ]; then echo /bin/bash; else echo /bin/sh; fi'],
    });
    const env = files.written.map(({ text }, index) => `ROLLOUT_START_FILE_${index}=${text}`);
    let result: { exitCode: number | null; stdout: string; stderr: string };
    try {
      result = await this.execs.collectExec(handle.id, { Cmd: ['/bin/sh', '-c', command], Env: env, User: '0' });
    } catch (err) {
      // An image that cannot run a shell never could host a trial: a start error, not a broken environment.
      if (err instanceof TaskEnvironmentError) throw new TaskEnvironmentError('EnvironmentStartError', err.message);
      throw err;
    }
    if (bound.length && result.exitCode === BOUND_FILES_MISSING) return false;
    if (result.exitCode !== 0) {
      throw new TaskEnvironmentError('EnvironmentStartError', `${command} failed in the container: ${result.stderr}`);
    }
    this.execs.setShell(handle.id, result.stdout.trim() === '/bin/bash' ? '/bin/bash' : '/bin/sh');
    return true;
  }
}

/** A start file's content in the host cache, named by its digest, readable by all (the container's users too). */
async function hostCopy(file: StartFile): Promise<string> {
  const content = 'text' in file ? Buffer.from(file.text) : await readFile(file.hostPath);
  const target = path.join(hostCacheDir(), 'container-files', createHash('sha256').update(content).digest('hex'));
  if (existsSync(target)) return target;
  await mkdir(path.dirname(target), { recursive: true });
  const temporary = `${target}.${randomBytes(4).toString('hex')}.tmp`;
  await writeFile(temporary, content);
  await chmod(temporary, 0o644); // whatever the umask
  await rename(temporary, target);
  return target;
}
