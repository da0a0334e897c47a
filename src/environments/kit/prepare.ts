/**
 * What every provider does once a trial's sandbox runs, before any step: the start files at the root, then one script
 * as root that makes the logs folders and runs the caller's setup (in the extraction's own exec where the carrier
 * can). A failure is the task's environment failing to start (EnvironmentStartError), never the agent's.
 */
import type { Readable } from 'node:stream';

import { CONTAINER_PATHS } from '../../contracts/paths';
import type { EnvironmentHandle } from '../../contracts/trial';
import { packedFiles } from '../archives';
import type { StartRequest } from '../../contracts/environment';
import { TaskEnvironmentError } from '../../contracts/environment';

const LOG_DIRS = `${CONTAINER_PATHS.agentLogs} ${CONTAINER_PATHS.verifierLogs}`;
/** /logs/agent and /logs/verifier, writable by whichever user the agent and the tests run as. */
export const LOGS_FOLDERS = `mkdir -p ${LOG_DIRS} && chmod 777 ${LOG_DIRS}`;

/** The start script: `first`, the logs folders, `checks`, the caller's setup, `last`; each only if the one before passed. */
export function startScript(
  setup: string | undefined,
  parts: { first?: readonly string[]; checks?: readonly string[]; last?: readonly string[] } = {}
): string {
  return [
    ...(parts.first ?? []),
    LOGS_FOLDERS,
    ...(parts.checks ?? []),
    ...(setup ? [setup] : []),
    ...(parts.last ?? []),
  ].join(' && ');
}

/** How a provider puts files in and runs its scripts as root. */
export interface StartCarrier {
  /** Named in errors ("the sandbox", "the pod"). */
  readonly where: string;
  extractAtRoot(handle: EnvironmentHandle, archive: Readable): Promise<void>;
  /** The archive extracted at the root, then the script as root, in one exec (see TarTransfer.extractAndRun). */
  extractAndRun?(
    handle: EnvironmentHandle,
    archive: Readable,
    script: string
  ): Promise<{ exitCode: number | string | null; output: string }>;
  /** The script as root: its exit status and output (stderr, or combined where the vendor combines). */
  runAsRoot(handle: EnvironmentHandle, script: string): Promise<{ exitCode: number | null; output: string }>;
}

/** The start files, then the start script (see startScript); gives the script's output. */
export async function prepareStart(
  handle: EnvironmentHandle,
  request: Pick<StartRequest, 'files' | 'setup'>,
  carrier: StartCarrier,
  parts?: { checks?: readonly string[]; last?: readonly string[] }
): Promise<string> {
  const script = startScript(request.setup, parts);
  const files = request.files?.length ? packedFiles(request.files) : null;
  let made: { exitCode: number | string | null; output: string };
  if (files && carrier.extractAndRun) made = await carrier.extractAndRun(handle, files, script);
  else {
    if (files) await carrier.extractAtRoot(handle, files);
    made = await carrier.runAsRoot(handle, script);
  }
  if (made.exitCode !== 0) {
    throw new TaskEnvironmentError('EnvironmentStartError', `${script} failed in ${carrier.where}: ${made.output}`);
  }
  return made.output;
}
