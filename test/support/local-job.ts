/**
 * A job over one trivial task on the `local` environment, run in this process (workers included) against the tests'
 * Temporal server: for orchestration tests and benchmarks where containers would only add noise.
 */
import { mkdir, mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';

import type { Client } from '@temporalio/client';
import { NativeConnection } from '@temporalio/worker';
import type { Worker } from '@temporalio/worker';

import type { JobProgress } from '../../workflows/messages';
import { createWorkers } from '../../workers/create-workers';
import { loadJobFile } from '../../src/job/load';
import { planJob } from '../../src/job/plan';
import { jobInput, saveJobFolder, startJobWorkflow } from '../../src/api/submit';
import { TEST_ADDRESS } from './temporal';

export async function writeLocalJob(options: {
  name: string;
  attempts: number;
  concurrency: number;
  execute?: string;
  /** tests/test.sh (run in the sandbox's folder); by default reward 1 when answer.txt says ok. */
  test?: string;
}): Promise<string> {
  const dir = await mkdtemp(path.join(tmpdir(), 'rollout-local-'));
  const task = path.join(dir, 'tasks', 'trivial');
  await mkdir(path.join(task, 'tests'), { recursive: true });
  await writeFile(
    path.join(task, 'task.toml'),
    'version = "1.0"\n[agent]\ntimeout_sec = 30.0\n[verifier]\ntimeout_sec = 30.0\n'
  );
  await writeFile(path.join(task, 'instruction.md'), 'Write ok to answer.txt.');
  await writeFile(
    path.join(task, 'tests', 'test.sh'),
    options.test ??
      'if [ "$(cat answer.txt)" = ok ]; then echo 1; else echo 0; fi > "$ROLLOUT_LOGS_DIR/verifier/reward.txt"\n'
  );
  await writeFile(
    path.join(dir, 'job.yaml'),
    [
      `name: ${options.name}`,
      `jobs_dir: ${path.join(dir, 'jobs')}`,
      `n_attempts: ${options.attempts}`,
      `n_concurrent_trials: ${options.concurrency}`,
      'environment:',
      '  type: local',
      'agents:',
      '  - name: echo',
      `    execute: ${options.execute ?? 'echo ok > answer.txt'}`,
      'datasets:',
      '  - path: tasks',
      '',
    ].join('\n')
  );
  return path.join(dir, 'job.yaml');
}

export async function localWorkers(options: {
  hostId: string;
  maxTrials: number;
  serveWorkflows?: boolean;
  /** False: workflows only, hosting no trial (every step then runs on another worker's host queue). */
  host?: boolean;
  address?: string;
}) {
  const address = options.address ?? TEST_ADDRESS;
  const connection = await NativeConnection.connect({ address });
  const workers: Worker[] = await createWorkers({
    connection,
    address,
    namespace: 'default',
    hostId: options.hostId,
    environmentTypes: options.host === false ? [] : ['local'],
    maxTrials: options.maxTrials,
    serveWorkflows: options.serveWorkflows ?? true,
  });
  return { connection, workers };
}

/** Plans and starts the job in jobFile; returns its handle and folder. */
export async function submitJob(
  client: Client,
  jobFile: string,
  options: { maxHistoryEvents?: number; hostLostTimeoutSec?: number; reconcileIntervalSec?: number } = {}
) {
  const job = await loadJobFile(jobFile);
  const plan = await planJob(job, { hostLostTimeoutSec: options.hostLostTimeoutSec });
  await saveJobFolder(plan);
  const handle = await startJobWorkflow(client, plan, jobInput(job, plan, options));
  return { handle, plan, job };
}

/** Sizes of every run of a workflow id (continue-as-new makes several). */
export async function runHistoryLengths(client: Client, workflowId: string): Promise<number[]> {
  const lengths: number[] = [];
  for await (const execution of client.workflow.list({ query: `WorkflowId = "${workflowId}"` })) {
    lengths.push(execution.historyLength);
  }
  return lengths;
}

export type { JobProgress };
