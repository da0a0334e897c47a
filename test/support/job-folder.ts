/**
 * Writes a job folder by hand, in the shapes Rollout writes (docs/results.md): config.json, plan.jsonl, trial
 * folders with result.json and logs, and the job result.json built by the same code the Job workflow uses. No
 * Temporal, no Docker: for statistics, the CI gate and the viewer, up to jobs of 10,000 trials.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';

import type { PlannedTrial } from '../../src/contracts/trial';
import { jobFiles, writeJsonAtomic } from '../../src/results/files';
import type { JobBudgetResult } from '../../src/budget/workflow/spend';
import type { JobResult } from '../../src/results/job-result';
import { buildJobResult } from '../../src/results/job-result';
import { addTrial, emptyStats } from '../../src/results/job-stats';
import type { TrialResult } from '../../src/results/trial-result';
import type { MetricType } from '../../src/contracts/job-config';
import type { Rewards, StepName, TrialError } from '../../src/contracts/trial';
import { STEPS } from '../../src/contracts/trial';

export interface FixtureTrial {
  task: string;
  agent: string;
  attempt: number;
  dataset?: string;
  rewards: Rewards | null;
  error?: TrialError | null;
  /** Fields other helpers add to a trial result (usage, agent); written as given. */
  extra?: Record<string, unknown>;
  /** Files under the trial folder, e.g. {'agent/execute.txt': '…'}; null: the trial has not finished. */
  files?: Record<string, string>;
  unfinished?: boolean;
}

export interface FixtureJob {
  name: string;
  trials: FixtureTrial[];
  metrics?: MetricType[];
  status?: JobResult['status'];
  agents?: { name: string }[];
  startedAt?: string;
  /** Live control (`rollout ctl`) as the Job workflow writes it. */
  control?: { paused: boolean; concurrency: number };
  /** result.json's `budget` (what the job's ledger says). */
  budget?: JobBudgetResult;
}

const BASE_TIME = Date.parse('2026-01-05T10:00:00Z');

export function trialNameOf(trial: Pick<FixtureTrial, 'task' | 'agent' | 'attempt'>): string {
  return `${trial.task}__${trial.agent}__${trial.attempt}`;
}

/** Writes `<root>/<name>/…` and returns the job folder. Trial i starts i seconds after the job and takes ~8 s. */
export async function writeJobFolder(root: string, job: FixtureJob): Promise<string> {
  const jobDir = path.join(root, job.name);
  await mkdir(jobDir, { recursive: true });
  const metrics = job.metrics ?? ['mean'];
  const agents = job.agents ?? [...new Set(job.trials.map((t) => t.agent))].map((name) => ({ name }));
  const datasets = [...new Set(job.trials.map((t) => t.dataset ?? 'tasks'))];
  await writeJsonAtomic(jobFiles.config(jobDir), {
    name: job.name,
    jobs_dir: root,
    n_attempts: Math.max(1, ...job.trials.map((t) => t.attempt)),
    n_concurrent_trials: 4,
    metrics: metrics.map((type) => ({ type })),
    environment: { type: 'docker' },
    agents,
    datasets: datasets.map((name) => ({ path: `/datasets/${name}` })),
  });
  const plan: PlannedTrial[] = job.trials.map((trial) => {
    const trialName = trialNameOf(trial);
    return {
      spec: {
        jobName: job.name,
        jobDir,
        jobWorkflowId: `rollout-job/${job.name}`,
        trialId: `${job.name}/${trialName}`,
        trialName,
        taskName: trial.task,
        taskDir: `/datasets/${trial.dataset ?? 'tasks'}/${trial.task}`,
        datasetName: trial.dataset ?? 'tasks',
        agentName: trial.agent,
        attempt: trial.attempt,
      },
      envLast: false,
    } as PlannedTrial;
  });
  await writeFile(jobFiles.plan(jobDir), plan.map((p) => JSON.stringify(p)).join('\n') + '\n');

  const stats = emptyStats(job.trials.length);
  let running = 0;
  for (const [index, trial] of job.trials.entries()) {
    const trialName = trialNameOf(trial);
    const dir = jobFiles.trialDir(jobDir, trialName);
    await mkdir(dir, { recursive: true });
    for (const [file, content] of Object.entries(trial.files ?? {})) {
      await mkdir(path.dirname(path.join(dir, file)), { recursive: true });
      await writeFile(path.join(dir, file), content);
    }
    if (trial.unfinished) {
      running += 1;
      continue;
    }
    const start = BASE_TIME + index * 1000;
    const steps: Partial<Record<StepName, { started_at: string; finished_at: string }>> = {};
    STEPS.forEach((step, i) => {
      steps[step] = { started_at: iso(start + i * 1000), finished_at: iso(start + i * 1000 + 900) };
    });
    const result: TrialResult = {
      trial_name: trialName,
      task_name: trial.task,
      dataset_name: trial.dataset ?? 'tasks',
      agent_name: trial.agent,
      agent: null,
      attempt: trial.attempt,
      rewards: trial.rewards,
      error: trial.error ?? null,
      agent_exit_code: trial.error ? null : 0,
      started_at: iso(start),
      finished_at: iso(start + STEPS.length * 1000),
      steps,
      workflow_id: `${job.name}/${trialName}`,
      job_name: job.name,
      task_dir: `/datasets/${trial.dataset ?? 'tasks'}/${trial.task}`,
      environment_type: 'docker',
      host: 'rollout-docker@fixture',
      image: 'rollout-env:fixture',
      unenforced_limits: [],
      restarts: 0,
      collected: null,
      ...trial.extra,
    };
    await writeFile(path.join(dir, 'result.json'), JSON.stringify(result, null, 2));
    addTrial(stats, {
      trialId: `${job.name}/${trialName}`,
      trialName,
      taskName: trial.task,
      datasetName: trial.dataset ?? 'tasks',
      agentName: trial.agent,
      attempt: trial.attempt,
      rewards: trial.rewards,
      error: trial.error ?? null,
      hostQueue: null,
      builtImage: null,
      envKey: 'fixture',
    });
  }
  const result = buildJobResult({
    jobName: job.name,
    workflowId: `rollout-job/${job.name}`,
    status: job.status ?? (running > 0 ? 'running' : 'completed'),
    startedAt: job.startedAt ?? iso(BASE_TIME),
    now: iso(BASE_TIME + (job.trials.length + 10) * 1000),
    running,
    stats,
    metrics,
    control: job.control,
  });
  await writeJsonAtomic(jobFiles.result(jobDir), job.budget ? { ...result, budget: job.budget } : result);
  return jobDir;
}

function iso(ms: number): string {
  return new Date(ms).toISOString();
}
