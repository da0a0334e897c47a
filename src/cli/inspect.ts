import type { Client } from '@temporalio/client';
import { optionalTsToMs, tsToMs } from '@temporalio/common/lib/time';
import { temporal } from '@temporalio/proto';

import type { JobProgress } from '../../workflows/messages';
import { jobProgressQuery } from '../../workflows/messages';
import { jobWorkflowId } from '../job/plan';
import { ifWorkflowExists } from '../workflow-not-found';
import type { StepName } from '../contracts/trial';
import { formatDuration } from './progress';
import { renderTable } from './report';

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

/** A Job workflow's run as listed, without its memo (an encrypted memo needs a key this process may not hold). */
interface ListedRun {
  workflowId: string;
  runId: string;
  status: string;
  startMs: number;
  closeMs: number | undefined;
}

/** Jobs known to the server (closed ones until the namespace's retention drops them). */
export async function listJobs(client: Client): Promise<JobListing[]> {
  const newest = new Map<string, ListedRun>();
  for await (const run of listJobRuns(client)) {
    const jobName = run.workflowId.replace(/^rollout-job\//, '');
    // Continue-as-new leaves one closed run per segment: the newest run speaks for the job.
    const known = newest.get(jobName);
    if (!known || known.startMs <= run.startMs) newest.set(jobName, run);
  }
  const jobs = await Promise.all(
    [...newest].map(async ([jobName, run]) => ({
      jobName,
      status: await jobStatus(client, run),
      startTime: new Date(run.startMs),
      closeTime: run.closeMs === undefined ? undefined : new Date(run.closeMs),
    }))
  );
  return jobs.sort((a, b) => b.startTime.getTime() - a.startTime.getTime());
}

async function* listJobRuns(client: Client): AsyncGenerator<ListedRun> {
  let nextPageToken: Uint8Array | undefined;
  do {
    const page = await client.workflowService.listWorkflowExecutions({
      namespace: client.options.namespace,
      query: 'WorkflowType = "jobWorkflow"',
      nextPageToken,
    });
    for (const raw of page.executions ?? [])
      yield {
        workflowId: raw.execution?.workflowId ?? '',
        runId: raw.execution?.runId ?? '',
        status: (temporal.api.enums.v1.WorkflowExecutionStatus[raw.status ?? 0] ?? 'UNSPECIFIED').replace(
          'WORKFLOW_EXECUTION_STATUS_',
          ''
        ),
        startMs: tsToMs(raw.startTime),
        closeMs: optionalTsToMs(raw.closeTime),
      };
    nextPageToken = page.nextPageToken?.length ? page.nextPageToken : undefined;
  } while (nextPageToken);
}

/** A completed Job workflow returns its progress, whose status says whether the job completed or was cancelled. */
async function jobStatus(client: Client, run: ListedRun): Promise<string> {
  if (run.status !== 'COMPLETED') return run.status.toLowerCase();
  const handle = client.workflow.getHandle<(input: unknown) => Promise<JobProgress>>(run.workflowId, run.runId);
  try {
    return (await handle.result()).status;
  } catch (err) {
    // A result this process cannot decode (a job encrypted with a ROLLOUT_PAYLOAD_KEY it does not hold) must not
    // hide every other job: that row says so, and why on stderr.
    console.error(`warning: ${run.workflowId}: its result could not be read: ${(err as Error).message}`);
    return 'unreadable';
  }
}

export async function jobExists(client: Client, jobName: string): Promise<boolean> {
  return (await ifWorkflowExists(client.workflow.getHandle(jobWorkflowId(jobName)).describe())) !== undefined;
}

/** `rollout jobs`: one row per job, under a header. */
export function renderJobList(jobs: JobListing[]): string {
  const rows = jobs.map((job) => [
    job.jobName,
    job.status,
    job.startTime.toISOString(),
    job.closeTime ? formatDuration(job.closeTime.getTime() - job.startTime.getTime()) : '–',
  ]);
  return renderTable([['job', 'status', 'started', 'took'], ...rows]);
}
