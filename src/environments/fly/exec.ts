/**
 * Commands and files in a Fly machine, all through the Machines API's exec (request/response). Fly's API proxy ends a
 * request at about 60 s (fly-go flaps/flaps_machines_wait.go:19 `proxyTimeoutThreshold = 60 * time.Second`, which
 * clamps every wait of fly-go's own; users report 408 `deadline_exceeded` on execs over 30 s), so no exec here holds
 * a request for long: a command starts detached (its output to files in the machine) and is polled, each poll
 * waiting at most POLL_HOLD_SEC in the machine; files travel as base64 tar archives in pieces of CHUNK_BYTES, in
 * execs' stdin (fly-go machine_types.go `MachineExecRequest.Stdin`: one string) or stdout. Fly's exec has no user,
 * working directory or environment of its own: see commandLine.
 */
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import type { Readable } from 'node:stream';
import { Readable as ReadableStream } from 'node:stream';

import { shellQuote } from '../../shell';
import type { EnvironmentHandle } from '../../contracts/trial';
import type { ExecRequest, ExecResult } from '../../contracts/environment';
import { TaskEnvironmentError } from '../../contracts/environment';
import { packedUpload } from '../archives';
import type { CollectBudget } from '../host-files';
import { extractArchive } from '../host-files';
import { commandLine } from '../trial-container';
import type { FlyApi } from './client';

/** A command without a limit of its own. */
const DEFAULT_EXEC_TIMEOUT_SEC = 600;
/** Each exec's own `timeout`: Rollout's execs are short (a start, a poll, a piece of a file), within the proxy's 60 s. */
const SHORT_EXEC_TIMEOUT_SEC = 50;
/** How long a poll waits in the machine for the command to end, at most (well inside the proxy's window). */
const POLL_HOLD_SEC = 20;
/**
 * A file's bytes per exec (4 MiB as base64 in the JSON body or reply). Fly publishes no body limit: docs/fly.md
 * lists the probe under "to confirm on a real account".
 */
const CHUNK_BYTES = 3 * 2 ** 20;
/** Output at most this large comes back in the poll that saw the command end (one round trip less). */
const INLINE_OUTPUT_BYTES = 2 ** 20;
/** Where a detached command keeps its script, output and exit status. */
const EXEC_DIR = '/tmp/.rollout-exec';

/** The machine's app and id, as a handle's id (`app/machine`): any worker can address it. */
export function machineRef(handle: EnvironmentHandle): { app: string; id: string } {
  const [app, id] = handle.id.split('/');
  if (!app || !id) throw new Error(`not a Fly machine handle: ${handle.id}`);
  return { app, id };
}

/**
 * Every process but the machine's own (Fly's init is PID 1; its main process is the keep-alive, marked
 * `rollout-keepalive`, and the sleep under it), this shell and its ancestors (the detached command that runs it):
 * all that commands started, daemons included. As root. Fly's init reaps what it inherits, so no zombie keeps a pid.
 */
export const FLY_KILL_ALL = [
  'keep=" 1 $$ "; p=$$',
  'while p=$(sed -n "s/^PPid:[[:space:]]*//p" /proc/$p/status 2>/dev/null) && [ "${p:-0}" -gt 1 ]; do keep="$keep$p "; done',
  'for f in $(grep -l rollout-keepalive /proc/[0-9]*/cmdline 2>/dev/null); do p=${f#/proc/}; keep="$keep${p%/cmdline} "; done',
  'for d in /proc/[0-9]*; do p=${d#/proc/}',
  '  case "$keep" in *" $p "*) continue;; esac',
  '  pp=$(sed -n "s/^PPid:[[:space:]]*//p" $d/status 2>/dev/null)',
  '  case "$(readlink $d/exe 2>/dev/null)" in /.fly/*) continue;; esac',
  '  [ "$pp" != 1 ] && [ "$pp" != $$ ] && case "$keep" in *" $pp "*) continue;; esac',
  '  kill -9 $p 2>/dev/null',
  'done; true',
].join('\n');

export class MachineExec {
  constructor(private readonly api: () => FlyApi) {}

  /**
   * Starts the command detached, then polls until it ends or its limit passes (then every process it started is
   * killed and `timedOut` is true). Each request is short whatever the command's length.
   */
  async exec(handle: EnvironmentHandle, request: ExecRequest): Promise<ExecResult> {
    request.signal?.throwIfAborted();
    const signal = request.signal;
    const dir = `${EXEC_DIR}/${randomBytes(8).toString('hex')}`;
    // The job's script (a root-only file) removes itself first (the shell reads on from the open file): the
    // environment's values it carries, as a here-document the command reads from its stdin (see commandLine), stay
    // on no disk and in no argv while the command runs.
    const { argv, stdin } = commandLine('/bin/sh', request, handle.workdir);
    const end = `ROLLOUT_HERE_DOCUMENT_${randomBytes(12).toString('hex')}`;
    const hereDocument = stdin !== undefined ? ` <<'${end}'\n${stdin}${end}` : '';
    const job = `rm -f ${dir}/job\n${argv.map(shellQuote).join(' ')}${hereDocument}\n`;
    await this.run(handle, startDetached(dir), { stdin: job, signal });
    const deadline = Date.now() + (request.timeoutMs ?? DEFAULT_EXEC_TIMEOUT_SEC * 1000);
    for (;;) {
      const holdSec = Math.max(1, Math.min(POLL_HOLD_SEC, Math.ceil((deadline - Date.now()) / 1000)));
      const [status = '', stdout, stderr] = (await this.poll(handle, dir, holdSec, signal)).split('\n');
      if (status.trim()) {
        const [exitCode, outBytes, errBytes] = status.trim().split(' ').map(Number);
        const output =
          stdout !== undefined && stderr !== undefined
            ? { stdout: decoded(stdout), stderr: decoded(stderr) }
            : await this.readOutput(handle, dir, outBytes!, errBytes!, signal);
        return { exitCode: exitCode ?? null, ...output, timedOut: false };
      }
      if (Date.now() >= deadline) {
        await this.killAll(handle);
        await this.run(handle, `rm -rf ${dir}`);
        return { exitCode: null, stdout: '', stderr: '', timedOut: true };
      }
    }
  }

  /**
   * One poll of a detached command. The command may be a kill of every process (the verifier's first exec), which
   * kills this poll's shell too (exit 137): that poll saw nothing, the next one asks again.
   */
  private async poll(handle: EnvironmentHandle, dir: string, holdSec: number, signal?: AbortSignal): Promise<string> {
    const { app, id } = machineRef(handle);
    const command = ['/bin/sh', '-c', pollDetached(dir, holdSec)];
    const reply = await this.api().exec(app, id, { command, timeout: SHORT_EXEC_TIMEOUT_SEC }, signal);
    if (reply.exit_code === 137) return '';
    if (reply.exit_code !== 0) {
      const output = `${reply.stderr ?? ''}${reply.stdout ?? ''}`.trim().slice(-2000);
      throw new Error(`fly: polling a command in machine ${id} failed (exit ${reply.exit_code}): ${output}`);
    }
    return reply.stdout ?? '';
  }

  /** A detached command's output too large to come back with its status: read in pieces, then its files removed. */
  private async readOutput(
    handle: EnvironmentHandle,
    dir: string,
    outBytes: number,
    errBytes: number,
    signal?: AbortSignal
  ): Promise<{ stdout: string; stderr: string }> {
    const read = async (file: string, size: number) => {
      const pieces: Buffer[] = [];
      for await (const piece of this.pieces(handle, file, size, signal)) pieces.push(piece);
      return Buffer.concat(pieces).toString('utf8');
    };
    const output = { stdout: await read(`${dir}/out`, outBytes), stderr: await read(`${dir}/err`, errBytes) };
    await this.run(handle, `rm -rf ${dir}`, { signal });
    return output;
  }

  /** A file of the machine, `size` bytes, read one CHUNK_BYTES piece per exec. */
  private async *pieces(handle: EnvironmentHandle, file: string, size: number, signal?: AbortSignal) {
    for (let index = 0; index * CHUNK_BYTES < size; index++) {
      const piece = `dd if=${file} bs=${CHUNK_BYTES} skip=${index} count=1 2>/dev/null | base64 | tr -d '\\n'`;
      yield Buffer.from(await this.run(handle, piece, { signal }), 'base64');
    }
  }

  /** A command of Rollout's own (short), as root; fails with its output unless it exits 0. */
  async run(
    handle: EnvironmentHandle,
    command: string,
    options: { stdin?: string; signal?: AbortSignal } = {}
  ): Promise<string> {
    const { app, id } = machineRef(handle);
    const reply = await this.api().exec(
      app,
      id,
      {
        command: ['/bin/sh', '-c', command],
        timeout: SHORT_EXEC_TIMEOUT_SEC,
        ...(options.stdin !== undefined ? { stdin: options.stdin } : {}),
      },
      options.signal
    );
    if (reply.exit_code !== 0) {
      const output = `${reply.stderr ?? ''}${reply.stdout ?? ''}`.trim().slice(-2000);
      if (reply.exit_code === 126 || reply.exit_code === 127) {
        throw new TaskEnvironmentError('EnvironmentBrokenError', `the machine can no longer run a command: ${output}`);
      }
      throw new Error(
        `fly: \`${command.split('\n')[0]}\` failed in machine ${id} (exit ${reply.exit_code}): ${output}`
      );
    }
    return reply.stdout ?? '';
  }

  killAll(handle: EnvironmentHandle): Promise<string> {
    return this.run(handle, FLY_KILL_ALL);
  }

  /** A folder's contents land inside each containerPath; a single file lands as containerPath/<its name>. */
  async upload(handle: EnvironmentHandle, hostPath: string, containerPath: string | readonly string[]): Promise<void> {
    await this.extractAtRoot(handle, (await packedUpload(hostPath, containerPath)).archive);
  }

  /**
   * Extracts a tar at the machine's root: one exec when it fits in a piece, else appended to a file of the machine
   * one CHUNK_BYTES piece per exec, then extracted.
   */
  async extractAtRoot(handle: EnvironmentHandle, archive: Readable): Promise<void> {
    const file = `/tmp/.rollout-upload-${randomBytes(8).toString('hex')}`;
    let pending = Buffer.alloc(0);
    let sent = 0;
    for await (const chunk of archive) {
      pending = Buffer.concat([pending, chunk as Buffer]);
      while (pending.length >= CHUNK_BYTES) {
        const piece = pending.subarray(0, CHUNK_BYTES);
        pending = pending.subarray(CHUNK_BYTES);
        await this.run(handle, `base64 -d ${sent === 0 ? '>' : '>>'} ${file}`, { stdin: piece.toString('base64') });
        sent += 1;
      }
    }
    if (sent === 0) {
      await this.run(handle, 'base64 -d | tar -xmf - -C /', { stdin: pending.toString('base64') });
      return;
    }
    if (pending.length > 0) await this.run(handle, `base64 -d >> ${file}`, { stdin: pending.toString('base64') });
    await this.run(handle, `tar -xmf ${file} -C /; s=$?; rm -f ${file}; exit $s`);
  }

  /** See extractArchive: the contents of a folder land in hostDir; links and `../` escapes are skipped. */
  async download(
    handle: EnvironmentHandle,
    containerPath: string,
    hostDir: string,
    budget?: CollectBudget
  ): Promise<void> {
    const dir = shellQuote(path.posix.dirname(containerPath));
    const base = shellQuote(path.posix.basename(containerPath));
    const file = `/tmp/.rollout-download-${randomBytes(8).toString('hex')}`;
    // Nothing there (the agent wrote no logs) is normal: an empty reply. A small archive comes back at once.
    const [size = '', inline] = (
      await this.run(
        handle,
        `if [ -e ${dir}/${base} ]; then tar -cf ${file} -C ${dir} ${base} && n=$(wc -c < ${file}) && echo $n && ` +
          `if [ $n -le ${CHUNK_BYTES} ]; then base64 < ${file} | tr -d '\\n'; rm -f ${file}; fi; fi`
      )
    ).split('\n');
    if (!size.trim()) return;
    const archive =
      inline !== undefined && Number(size) <= CHUNK_BYTES
        ? ReadableStream.from([Buffer.from(inline, 'base64')], { objectMode: false })
        : ReadableStream.from(this.removedAfter(handle, file, this.pieces(handle, file, Number(size))), {
            objectMode: false,
          });
    await extractArchive(archive, hostDir, budget, path.posix.basename(containerPath));
  }

  /** The pieces of a machine's file, the file removed once they are read (or no longer wanted). */
  private async *removedAfter(handle: EnvironmentHandle, file: string, pieces: AsyncGenerator<Buffer>) {
    try {
      yield* pieces;
    } finally {
      await this.run(handle, `rm -f ${file}`);
    }
  }
}

/**
 * Starts the job script (stdin) detached in its own session, so it outlives the exec that started it: its output to
 * dir/out and dir/err, then its exit status to dir/rc (written whole, by a rename).
 */
function startDetached(dir: string): string {
  const wrapper = `/bin/sh ${dir}/job >${dir}/out 2>${dir}/err; echo $? >${dir}/rc.part; mv ${dir}/rc.part ${dir}/rc`;
  return [
    `(umask 077 && mkdir -p ${dir} && cat >${dir}/job) && printf '%s\\n' ${shellQuote(wrapper)} >${dir}/run || exit 1`,
    `if command -v setsid >/dev/null 2>&1; then cd / && setsid /bin/sh ${dir}/run </dev/null >/dev/null 2>&1 &`,
    `else cd / && /bin/sh ${dir}/run </dev/null >/dev/null 2>&1 & fi`,
  ].join('\n');
}

/**
 * Waits up to holdSec (by the clock: `sleep 0.1` may not exist) for the job's exit status. Prints nothing while it
 * runs; once it ended, `<status> <stdout bytes> <stderr bytes>`, then, when they are small, both outputs base64 on a
 * line each (and the job's files are removed).
 */
function pollDetached(dir: string, holdSec: number): string {
  return [
    `end=$(($(date +%s) + ${holdSec}))`,
    `while [ ! -e ${dir}/rc ] && [ $(date +%s) -lt $end ]; do sleep 0.1 2>/dev/null || sleep 1; done`,
    `[ -e ${dir}/rc ] || exit 0`,
    `o=$(wc -c <${dir}/out) e=$(wc -c <${dir}/err); echo "$(cat ${dir}/rc) $o $e"`,
    `if [ $((o + e)) -le ${INLINE_OUTPUT_BYTES} ]; then`,
    `  base64 <${dir}/out | tr -d '\\n'; echo; base64 <${dir}/err | tr -d '\\n'; echo; rm -rf ${dir}`,
    'fi',
  ].join('\n');
}

function decoded(base64: string): string {
  return Buffer.from(base64, 'base64').toString('utf8');
}
