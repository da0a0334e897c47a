/**
 * Commands in a trial's pod through the API's websocket exec, Rollout's own scripts fed and read as streams (the
 * carrier of ./files.ts). Kubernetes exec has no user, working directory or environment of its own: see exec.
 */
import { Readable } from 'node:stream';

import type { Exec, V1Status } from '@kubernetes/client-node';

import type { EnvironmentHandle } from '../../contracts/trial';
import type { ExecRequest, ExecResult } from '../../contracts/environment';
import { TaskEnvironmentError } from '../../contracts/environment';
import { OutputTail } from '../exec-output';
import { Shells } from '../kit/shell';
import { KILL_ALL, commandLine } from '../trial-container';
import type { Cluster, Clusters, PodRef } from './client';
import { PodLostError, apiMessage, isNotFound } from './client';
import { CONTAINER, parseHandleId } from './pod-spec';
import { podState } from './pod-watch';

export class PodExec {
  private readonly shells = new Shells();

  constructor(private readonly clusters: Clusters) {}

  /** Forgets a pod that is going away. */
  forget(handleId: string): void {
    this.shells.forget(handleId);
  }

  /**
   * Runs the command through the API's websocket exec; its exit code comes from the status channel. Kubernetes exec
   * has no user, working directory or environment of its own: the command runs as the container's user, in `cwd`
   * (else the handle's), with `env` read from its stdin (see commandLine).
   */
  async exec(handle: EnvironmentHandle, request: ExecRequest): Promise<ExecResult> {
    request.signal?.throwIfAborted();
    const shell = await this.shellOf(handle);
    const stdout = new OutputTail();
    const stderr = new OutputTail();
    // The env goes over the exec's stdin: the command is part of the request's URL (and the API server's audit log).
    const { argv, stdin } = commandLine(shell, request, handle.workdir);
    const run = await this.run(handle, argv, {
      stdout,
      stderr,
      ...(stdin !== undefined ? { stdin: Readable.from([stdin]) } : {}),
      timeoutMs: request.timeoutMs,
      signal: request.signal,
    });
    if (run.outcome === 'ended')
      return { exitCode: run.exitCode, stdout: stdout.text(), stderr: stderr.text(), timedOut: false };
    await this.killAll(handle);
    if (run.outcome === 'aborted') throw request.signal?.reason;
    return { exitCode: null, stdout: stdout.text(), stderr: stderr.text(), timedOut: true };
  }

  /** See Shells. */
  private shellOf(handle: EnvironmentHandle): Promise<string> {
    return this.shells.of(handle.id, async (probe) => (await this.run(handle, ['/bin/sh', '-c', probe])).exitCode);
  }

  /** Kills every process in the container but PID 1: all that the agent started, daemons included. */
  async killAll(handle: EnvironmentHandle): Promise<void> {
    await this.run(handle, ['/bin/sh', '-c', `${KILL_ALL}; true`]);
  }

  /**
   * One exec over the API's websocket: output into the given streams, stdin from `stdin`, the exit code from the
   * status channel. A connection that ends without a status means the pod went away (or broke): which one is asked.
   */
  private async run(
    handle: EnvironmentHandle,
    command: string[],
    options: {
      stdout?: NodeJS.WritableStream;
      stderr?: NodeJS.WritableStream;
      stdin?: Readable;
      timeoutMs?: number;
      signal?: AbortSignal;
    } = {}
  ): Promise<{ outcome: 'ended' | 'timedOut' | 'aborted'; exitCode: number | null }> {
    const ref = parseHandleId(handle.id);
    const cluster = this.clusters.get(ref.context);
    let status: V1Status | undefined;
    const stdout = options.stdout ?? new OutputTail();
    const stderr = options.stderr ?? new OutputTail();
    let socket: Awaited<ReturnType<Exec['exec']>>;
    try {
      socket = await cluster.exec.exec(
        ref.namespace,
        ref.name,
        CONTAINER,
        command,
        stdout as never,
        stderr as never,
        options.stdin ?? null,
        false,
        (received) => (status = received)
      );
    } catch (err) {
      throw await this.execFailure(cluster, ref, err);
    }
    const outcome = await new Promise<'ended' | 'timedOut' | 'aborted'>((resolve) => {
      let timer: NodeJS.Timeout | undefined;
      const settle = (result: 'ended' | 'timedOut' | 'aborted') => {
        clearTimeout(timer);
        options.signal?.removeEventListener('abort', onAbort);
        resolve(result);
      };
      const onAbort = () => settle('aborted');
      if (options.timeoutMs) timer = setTimeout(() => settle('timedOut'), options.timeoutMs);
      if (options.signal?.aborted) onAbort();
      options.signal?.addEventListener('abort', onAbort, { once: true });
      socket.on('close', () => settle('ended'));
    });
    if (outcome !== 'ended') {
      socket.close();
      return { outcome, exitCode: null };
    }
    if (!status) throw await this.execFailure(cluster, ref, new Error('the exec ended without a status'));
    const finished: V1Status = status;
    // Killed by a signal, or not started at all: perhaps with its pod (deleted, evicted, past its deadline), which is
    // no outcome of the command.
    const signalled = finished.reason === 'NonZeroExitCode' && Number(finished.details?.causes?.[0]?.message) >= 128;
    if (signalled || (finished.status !== 'Success' && finished.reason !== 'NonZeroExitCode')) {
      await this.assertPodUp(cluster, ref);
    }
    return { outcome, exitCode: exitCodeOf(finished) };
  }

  /** Throws PodLostError when the pod has been deleted, evicted or stopped by the cluster. */
  private async assertPodUp(cluster: Cluster, ref: PodRef): Promise<void> {
    const lost = await this.execFailure(cluster, ref, undefined);
    if (lost instanceof PodLostError) throw lost;
  }

  /** Why an exec failed: a pod that is gone or evicted (the cluster's doing), one whose container ended, or `err`. */
  private async execFailure(cluster: Cluster, ref: PodRef, err: unknown): Promise<Error> {
    const pod = await cluster.core.readNamespacedPod({ name: ref.name, namespace: ref.namespace }).catch((e) => {
      if (isNotFound(e)) return null;
      return undefined; // the API itself failed: report the exec's own error
    });
    if (pod === null) return new PodLostError(`pod ${ref.namespace}/${ref.name} is gone (deleted)`);
    if (pod) {
      const state = podState(pod);
      if (state.kind === 'lost') return new PodLostError(`pod ${ref.namespace}/${ref.name}: ${state.message}`);
      if (state.kind === 'exited') {
        return new TaskEnvironmentError('EnvironmentBrokenError', `pod ${ref.namespace}/${ref.name}: ${state.message}`);
      }
    }
    return new Error(`exec in pod ${ref.namespace}/${ref.name}: ${apiMessage(err)}`, { cause: err });
  }

  /** One of Rollout's own scripts under /bin/sh, fed `stdin`, its stdout to `stdout`: the carrier of ./files.ts. */
  async runScript(
    handle: EnvironmentHandle,
    script: string,
    io: { stdin?: Readable; stdout?: NodeJS.WritableStream }
  ): Promise<{ exitCode: number | string | null; stderr: string }> {
    const stderr = new OutputTail();
    const run = await this.run(handle, ['/bin/sh', '-c', script], { ...io, stderr });
    return { exitCode: run.outcome === 'ended' ? run.exitCode : run.outcome, stderr: stderr.text() };
  }
}

/** The exit code in an exec's status: 0 on Success, the ExitCode cause on NonZeroExitCode. */
function exitCodeOf(status: V1Status): number | null {
  if (status.status === 'Success') return 0;
  if (status.reason === 'NonZeroExitCode') {
    const cause = status.details?.causes?.find((c) => c.reason === 'ExitCode');
    return cause?.message !== undefined ? Number(cause.message) : null;
  }
  // The runtime could not start the command: the container's own files are broken (an agent deleted /bin).
  throw new TaskEnvironmentError(
    'EnvironmentBrokenError',
    `the pod can no longer start a process: ${status.message ?? status.reason ?? 'unknown failure'}`
  );
}
