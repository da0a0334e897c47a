/**
 * Files in and out of a sandbox by tar over any exec, for the providers whose vendor has no archive API (Docker's
 * has): one archive each way however many files, unpacked or packed by `tar` in the sandbox (modes kept), and on the
 * host by the same code as Docker's copies (extractArchive: links and `../` escapes skipped). Two carriers: a file
 * staged in the sandbox through the vendor's file API (Daytona, E2B), or the exec's own stdin and stdout (Modal,
 * Kubernetes). Fly's carrier is its own (pieces within its 60 s requests); it packs uploads here too.
 */
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { PassThrough, Readable, Writable } from 'node:stream';

import { shellQuote } from '../../shell';
import type { EnvironmentHandle } from '../../contracts/trial';
import type { FolderSelection } from '../../contracts/environment';
import { packedUpload } from '../archives';
import type { CollectBudget } from '../host-files';
import { extractArchive } from '../host-files';

/** Where a fetched archive lands: its folder on the host, the collect budget, its name, the selection it keeps. */
interface ArchiveDestination {
  hostDir: string;
  budget?: CollectBudget;
  name: string;
  selection?: FolderSelection;
}

function extractInto(
  archive: NodeJS.ReadableStream,
  { hostDir, budget, name, selection }: ArchiveDestination
): Promise<boolean> {
  return extractArchive(archive, hostDir, budget, name, selection);
}

/** The pack scripts' exit status when nothing is at the path: normal (the agent wrote no logs), nothing to fetch. */
const NOTHING_THERE = 3;

/** A file name in the sandbox's /tmp for an archive on its way. */
function scratchArchive(): string {
  return `/tmp/.rollout-${randomBytes(8).toString('hex')}.tar`;
}

/**
 * Extracts `file` (of the sandbox, removed after; else stdin) at the root, its folders `dirs` made first (empty
 * uploads); exit 0 only when that passed, so that a command can follow it with `&&`.
 */
function extractScript(dirs: readonly string[], file?: string): string {
  const made = makeDirsFirst(dirs);
  return file ? `{ ${made}tar -xmf ${file} -C / ; s=$?; rm -f ${file}; [ $s -eq 0 ]; }` : `${made}tar -xmf - -C /`;
}

/**
 * The largest archive put inside a command: 64 KiB once in base64, well under Linux's 128 KiB for one argument
 * (envd runs `bash -l -c <command>`, Daytona's toolbox `sh -c`).
 */
const INLINE_ARCHIVE_BYTES = 48 * 1024;
/** The inline extraction's exit status, and the line it prints, where the sandbox has no `base64`: staged instead. */
const NO_BASE64 = 97;
const NO_BASE64_LINE = 'rollout: no base64 in the sandbox';

/**
 * The archive's bytes when it is small enough to go inline (else null), and the whole archive as a stream either
 * way: what was read first, then the rest.
 */
async function inlineable(archive: Readable): Promise<{ small: Buffer | null; whole: Readable }> {
  // Read by hand: leaving a `for await` loop early would destroy the stream the staged path still needs.
  const chunks = archive[Symbol.asyncIterator]() as AsyncIterator<Buffer>;
  const read: Buffer[] = [];
  let size = 0;
  for (let next = await chunks.next(); !next.done; next = await chunks.next()) {
    read.push(next.value);
    size += next.value.length;
    if (size > INLINE_ARCHIVE_BYTES) {
      async function* whole() {
        yield* read;
        for (let more = await chunks.next(); !more.done; more = await chunks.next()) yield more.value;
      }
      return { small: null, whole: Readable.from(whole()) };
    }
  }
  return { small: Buffer.concat(read), whole: Readable.from(read) };
}

/** extractScript's for an archive carried in the command itself, in base64. */
function inlineExtractScript(dirs: readonly string[], archive: Buffer): string {
  const made = makeDirsFirst(dirs);
  return (
    `{ command -v base64 >/dev/null 2>&1 || { echo '${NO_BASE64_LINE}' >&2; exit ${NO_BASE64}; }; } && ` +
    `${made}printf %s '${archive.toString('base64')}' | base64 -d | tar -xmf - -C /`
  );
}

function lacksBase64(run: { exitCode: number | null; output: string }): boolean {
  return run.exitCode === NO_BASE64 && run.output.includes(NO_BASE64_LINE);
}

/** The upload's folders made before its extraction (an empty upload still makes them), then `&&`. */
function makeDirsFirst(dirs: readonly string[]): string {
  return dirs.length ? `mkdir -p ${dirs.map(shellQuote).join(' ')} && ` : '';
}

/** The extraction, then `script` if it passed. */
function thenRun(extract: string, script?: string): string {
  return script ? `${extract} && ${script}` : extract;
}

/** An extraction's exec: its exit status and output (see the carriers' `run`). */
export interface ExtractRun {
  where: string;
  exitCode: number | string | null;
  output: string;
}

/** Packs containerPath (its own name in the archive) into `file`, else to stdout; NOTHING_THERE when absent. */
function packScript(containerPath: string, file?: string): string {
  const dir = shellQuote(path.posix.dirname(containerPath));
  const name = shellQuote(path.posix.basename(containerPath));
  return (
    `test -e ${shellQuote(containerPath)} || exit ${NOTHING_THERE}; ` +
    (file ? `tar -cf ${file} -C ${dir} ${name}` : `exec tar -cf - -C ${dir} ${name}`)
  );
}

/**
 * Packs the `folders` of `dir` that are there into `file`, else to stdout, named as Docker's archive of `dir` names
 * them (`<dir's name>/<folder>/…`); NOTHING_THERE when none is.
 */
function packFoldersScript(dir: string, folders: readonly string[], file?: string): string {
  const named = folders.map((folder) => shellQuote(path.posix.join(path.posix.basename(dir), folder))).join(' ');
  return (
    `cd ${shellQuote(path.posix.dirname(dir))} || exit ${NOTHING_THERE}; set --; ` +
    `for p in ${named}; do if [ -e "$p" ]; then set -- "$@" "$p"; fi; done; [ $# -gt 0 ] || exit ${NOTHING_THERE}; ` +
    (file ? `tar -cf ${file} "$@"` : `exec tar -cf - "$@"`)
  );
}

function uploadFailed(where: string, dirs: readonly string[], exit: number | string | null, output: string): Error {
  return new Error(`upload to ${dirs.join(', ') || '/'} failed in ${where} (exit ${exit}): ${output.trim()}`);
}

function downloadFailed(where: string, containerPath: string, exit: number | string | null, output: string): Error {
  return new Error(`download of ${containerPath} failed in ${where} (exit ${exit}): ${output.trim()}`);
}

/** A sandbox whose vendor moves whole files: Rollout's short scripts as root, and a file written or read. */
export interface StagedCarrier {
  /** Named in errors ("sandbox <id>"). */
  readonly where: string;
  /** One of Rollout's short scripts, as root: its exit status and (combined or error) output. */
  run(script: string): Promise<{ exitCode: number | null; output: string }>;
  put(file: string, archive: Readable): Promise<void>;
  get(file: string): Promise<NodeJS.ReadableStream>;
}

/** A sandbox whose exec streams: a script under /bin/sh as root, fed `stdin` (then closed), its stdout to `stdout`. */
export interface StreamedCarrier {
  readonly where: string;
  run(
    script: string,
    io: { stdin?: Readable; stdout?: NodeJS.WritableStream }
  ): Promise<{ exitCode: number | string | null; stderr: string }>;
}

/** Upload, extraction at the root and download for one carrier kind; the provider says how to reach a handle's. */
abstract class TarTransfer {
  async upload(handle: EnvironmentHandle, hostPath: string, containerPath: string | readonly string[]): Promise<void> {
    const { archive, targets } = await packedUpload(hostPath, containerPath);
    await this.extractAtRoot(handle, archive, targets);
  }

  async extractAtRoot(handle: EnvironmentHandle, archive: Readable, dirs: readonly string[] = []): Promise<void> {
    const { where, exitCode, output } = await this.extractThen(handle, archive, dirs);
    if (exitCode !== 0) throw uploadFailed(where, dirs, exitCode, output);
  }

  /**
   * The archive extracted at the root, then `script` as root if that passed, in one exec (where an extraction and
   * a script would cost one each): the exec's status and output.
   */
  extractAndRun(handle: EnvironmentHandle, archive: Readable, script: string): Promise<ExtractRun> {
    return this.extractThen(handle, archive, [], script);
  }

  protected abstract extractThen(
    handle: EnvironmentHandle,
    archive: Readable,
    dirs: readonly string[],
    script?: string
  ): Promise<ExtractRun>;
  /** See extractArchive: the contents of a folder land in hostDir. */
  async download(
    handle: EnvironmentHandle,
    containerPath: string,
    hostDir: string,
    budget?: CollectBudget
  ): Promise<void> {
    const name = path.posix.basename(containerPath);
    await this.fetch(handle, containerPath, (file) => packScript(containerPath, file), { hostDir, budget, name });
  }

  /** Environment.downloadFolders: the folders there in one archive (one exec, where each folder would cost its own). */
  downloadFolders(
    handle: EnvironmentHandle,
    containerPath: string,
    selection: FolderSelection,
    hostDir: string,
    budget?: CollectBudget
  ): Promise<boolean> {
    const pack = (file?: string) => packFoldersScript(containerPath, selection.folders, file);
    return this.fetch(handle, containerPath, pack, { hostDir, budget, name: '', selection });
  }

  /** Runs `pack` and extracts its archive (see extractArchive); true when nothing was there. */
  protected abstract fetch(
    handle: EnvironmentHandle,
    containerPath: string,
    pack: (file?: string) => string,
    into: ArchiveDestination
  ): Promise<boolean>;
}

/** The archive staged as a file of the sandbox (removed after), moved by the vendor's file API. */
export class StagedTransfer extends TarTransfer {
  constructor(private readonly carrier: (handle: EnvironmentHandle) => Promise<StagedCarrier> | StagedCarrier) {
    super();
  }

  /** A small archive goes inside the extracting exec's command (one API call, where staging it costs two). */
  protected async extractThen(
    handle: EnvironmentHandle,
    archive: Readable,
    dirs: readonly string[],
    script?: string
  ): Promise<ExtractRun> {
    const carrier = await this.carrier(handle);
    const { small, whole } = await inlineable(archive);
    if (small) {
      const inline = await carrier.run(thenRun(inlineExtractScript(dirs, small), script));
      if (!lacksBase64(inline)) return { where: carrier.where, ...inline };
    }
    const file = scratchArchive();
    await carrier.put(file, whole);
    const { exitCode, output } = await carrier.run(thenRun(extractScript(dirs, file), script));
    return { where: carrier.where, exitCode, output };
  }

  protected async fetch(
    handle: EnvironmentHandle,
    containerPath: string,
    pack: (file?: string) => string,
    into: ArchiveDestination
  ): Promise<boolean> {
    const carrier = await this.carrier(handle);
    const file = scratchArchive();
    const packed = await carrier.run(pack(file));
    if (packed.exitCode === NOTHING_THERE) return true;
    try {
      if (packed.exitCode !== 0) throw downloadFailed(carrier.where, containerPath, packed.exitCode, packed.output);
      return await extractInto(await carrier.get(file), into);
    } finally {
      await carrier.run(`rm -f ${file}`);
    }
  }
}

/** The archive over the exec's stdin or stdout, nothing staged in the sandbox. */
export class StreamedTransfer extends TarTransfer {
  constructor(private readonly carrier: (handle: EnvironmentHandle) => StreamedCarrier) {
    super();
  }

  protected async extractThen(
    handle: EnvironmentHandle,
    archive: Readable,
    dirs: readonly string[],
    script?: string
  ): Promise<ExtractRun> {
    const carrier = this.carrier(handle);
    const { exitCode, stderr } = await carrier.run(thenRun(extractScript(dirs), script), { stdin: archive });
    return { where: carrier.where, exitCode, output: stderr };
  }

  /** Nothing there leaves hostDir unmade. */
  protected async fetch(
    handle: EnvironmentHandle,
    containerPath: string,
    pack: (file?: string) => string,
    into: ArchiveDestination
  ): Promise<boolean> {
    const carrier = this.carrier(handle);
    const archive = new PassThrough();
    let extracted: Promise<boolean> | undefined;
    // Extraction starts with the archive's first bytes: a path with nothing there sends none, and makes no hostDir.
    const stdout = new Writable({
      write(chunk: Buffer, _encoding, done) {
        if (!extracted) {
          extracted = extractInto(archive, into);
          // Awaited below, once the exec has ended; until then a failure must not count as unhandled.
          extracted.catch(() => undefined);
        }
        // Extraction gave up (see FolderSelection): the rest is not read.
        if (!archive.destroyed) archive.write(chunk);
        done();
      },
    });
    const run = await carrier.run(pack(), { stdout }).finally(() => archive.end());
    const complete = (await extracted) ?? true;
    if (run.exitCode === NOTHING_THERE || run.exitCode === 0 || !complete) return complete;
    throw downloadFailed(carrier.where, containerPath, run.exitCode, run.stderr);
  }
}
