import type { Client, WorkflowExecutionInfo } from '@temporalio/client';
import { WorkflowNotFoundError } from '@temporalio/client';

import type { JobProgress } from '../../workflows/messages';
import { jobProgressQuery } from '../../workflows/messages';
import { jobWorkflowId } from '../job/plan';
import type { StepName } from '../trial/types';

const QUERY_TIMEOUT_MS = 5_000;

/** Which lifecycle step an activity type is, to show a running trial's current step without a worker. */
const STEP_OF_ACTIVITY: Record<string, StepName | 'claim host'> = {
  claimHost: 'claim host',
  buildEnvironment: 'build',
  startEnvironment: 'start',
  installAgent: 'install',
  executeAgent: 'execute',
  runVerifier: 'verify',
  collectLogs: 'collect',
  stopEnvironment: 'stop',
  cleanupEnvironment: 'cleanup',
};

export interface RunningTrialStep {
  trialId: string;
  step: string;
  attempt: number;
}

/**
 * A job's progress: its result once the Job workflow completed, else live from its query (which needs a worker);
 * undefined when no worker answers in time.
 */
export async function queryProgress(client: Client, jobName: string): Promise<JobProgress | undefined> {
  const handle = client.workflow.getHandle<(input: unknown) => Promise<JobProgress>>(jobWorkflowId(jobName));
  const { status } = await handle.describe();
  if (status.name === 'COMPLETED') return handle.result();
  const timeout = new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), QUERY_TIMEOUT_MS).unref());
  return Promise.race([handle.query(jobProgressQuery).catch(() => undefined), timeout]);
}

/** Running trials of a job and the step each is in, read from the server (works with no worker up). */
export async function runningTrialSteps(client: Client, jobName: string): Promise<RunningTrialStep[]> {
  const steps: RunningTrialStep[] = [];
  // JSON string syntax is the visibility query's: a name with a quote or a backslash stays one literal.
  const query = `RolloutJob = ${JSON.stringify(jobName)} AND WorkflowType = "trialWorkflow" AND ExecutionStatus = "Running"`;
  for await (const execution of client.workflow.list({ query })) {
    const description = await client.workflow.getHandle(execution.workflowId).describe();
    const pending = description.raw.pendingActivities?.[0];
    const type = pending?.activityType?.name ?? '';
    steps.push({
      trialId: execution.workflowId,
      step: STEP_OF_ACTIVITY[type] ?? 'waiting',
      attempt: pending?.attempt ?? 0,
    });
  }
  return steps.sort((a, b) => a.trialId.localeCompare(b.trialId));
}

export interface JobListing {
  jobName: string;
  /** The job's own: running, completed or cancelled (a cancelled job's workflow completes); else Temporal's. */
  status: string;
  startTime: Date;
  closeTime: Date | undefined;
}

/** Jobs known to the server (closed ones until the namespace's retention drops them). */
export async function listJobs(client: Client): Promise<JobListing[]> {
  const newest = new Map<string, WorkflowExecutionInfo>();
  for await (const execution of client.workflow.list({ query: 'WorkflowType = "jobWorkflow"' })) {
    const jobName = execution.workflowId.replace(/^rollout-job\//, '');
    // Continue-as-new leaves one closed run per segment: the newest run speaks for the job.
    const known = newest.get(jobName);
    if (!known || known.startTime <= execution.startTime) newest.set(jobName, execution);
  }
  const jobs = await Promise.all(
    [...newest].map(async ([jobName, execution]) => ({
      jobName,
      status: await jobStatus(client, execution),
      startTime: execution.startTime,
      closeTime: execution.closeTime,
    }))
  );
  return jobs.sort((a, b) => b.startTime.getTime() - a.startTime.getTime());
}

/** A completed Job workflow returns its progress, whose status says whether the job completed or was cancelled. */
async function jobStatus(client: Client, execution: WorkflowExecutionInfo): Promise<string> {
  if (execution.status.name !== 'COMPLETED') return execution.status.name.toLowerCase();
  const handle = client.workflow.getHandle<(input: unknown) => Promise<JobProgress>>(
    execution.workflowId,
    execution.runId
  );
  return (await handle.result()).status;
}

export async function jobExists(client: Client, jobName: string): Promise<boolean> {
  try {
    await client.workflow.getHandle(jobWorkflowId(jobName)).describe();
    return true;
  } catch (err) {
    if (err instanceof WorkflowNotFoundError) return false;
    throw err;
  }
}
