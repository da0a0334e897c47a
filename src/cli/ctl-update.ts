/** How `rollout ctl` sends an update to a running workflow of a job (its Job workflow, or its budget ledger). */
import type { WorkflowHandle } from '@temporalio/client';
import { WorkflowUpdateFailedError } from '@temporalio/client';

import { InputError } from '../contracts/errors';
import { ifWorkflowExists } from '../workflow-not-found';
import { connectClient, resolveTemporal } from '../temporal/connect';

/** A worker runs the Job workflow's task within this, or the control is reported as not taken. */
const UPDATE_TIMEOUT_MS = 15_000;

/**
 * Runs `send` (an update) on a running workflow of the job and waits until it is applied. `missing`: what to say when
 * the workflow does not exist. A refusal by the workflow's validator is input (exit 2).
 */
export async function updateRunning<T>(
  job: string,
  workflowId: string,
  missing: string,
  send: (handle: WorkflowHandle) => Promise<T>
): Promise<T> {
  const endpoint = await resolveTemporal({ startDevServer: false });
  const { connection, client } = await connectClient(endpoint);
  try {
    const handle = client.workflow.getHandle(workflowId);
    const description = await ifWorkflowExists(handle.describe());
    if (!description) throw new InputError([{ file: job, message: missing }]);
    if (description.status.name !== 'RUNNING') {
      throw new InputError([
        { file: job, message: `the job is not running (${description.status.name.toLowerCase()})` },
      ]);
    }
    try {
      return await connection.withDeadline(Date.now() + UPDATE_TIMEOUT_MS, () => send(handle));
    } catch (err) {
      // The workflow's validator refused it (the CLI checks the same, so an older worker's rules): input, exit 2.
      if (err instanceof WorkflowUpdateFailedError) {
        throw new InputError([{ file: job, message: `refused: ${err.cause?.message ?? err.message}` }]);
      }
      if (isDeadline(err)) {
        throw new Error(
          `no worker applied the control within ${UPDATE_TIMEOUT_MS / 1000} s (is one running? rollout worker); ` +
            'it may still apply when a worker picks the job up: check with rollout status',
          { cause: err }
        );
      }
      throw err;
    }
  } finally {
    await connection.close();
  }
}

function isDeadline(err: unknown): boolean {
  // gRPC DEADLINE_EXCEEDED (4), possibly wrapped by the client.
  for (let e: unknown = err; e instanceof Error; e = e.cause) {
    if ((e as { code?: unknown }).code === 4) return true;
  }
  return false;
}
