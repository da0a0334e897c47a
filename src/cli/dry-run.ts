/**
 * `rollout run job.yaml --dry-run`: the plan (trials, environments to build, agents and models) and an estimate of
 * its model spend, with nothing started (no server, no worker, no container). Per agent, the estimate is what
 * earlier jobs in jobs_dir measured for the same agent, model and tasks (trial result.json `usage`); for tasks not
 * run before, that agent's and model's mean over other tasks; with no history, ASSUMED_TRIAL_USAGE at the model's
 * list price (src/budget/workflow/prices.ts), said so.
 */
import { existsSync } from 'node:fs';
import { readdir } from 'node:fs/promises';
import path from 'node:path';

import { usesGateway } from '../agents/config';
import { ifPresent } from '../files/absent';
import { readCallRecords } from '../gateway/records';
import { callCost, priceOf } from '../budget/workflow/prices';
import type { ResolvedJob } from '../job/load';
import { jobDirOf, planJob } from '../job/plan';
import { jobFiles, readJson } from '../results/files';
import { readJobTrials } from '../results/job-folder';
import type { TrialUsage } from '../contracts/trial';
import { LLM_CALLS_FILE, trialLayout } from '../contracts/paths';

/** A typical agentic trial when nothing was measured: stated in the output as an assumption. */
const ASSUMED_TRIAL_USAGE = { input_tokens: 300_000, cached_tokens: 0, output_tokens: 15_000 };

interface Measured {
  /** Per task name: usages of earlier trials of the same agent and model. */
  byTask: Map<string, TrialUsage[]>;
  /** The model the calls named (a custom agent's model is in its script). */
  model: string | null;
}

interface AgentEstimate {
  trials: number;
  tokens: number;
  costUsd: number | null;
  basis: string;
}

export async function dryRun(job: ResolvedJob): Promise<void> {
  const plan = await planJob(job);
  const envs = new Map<string, string>();
  for (const { spec } of plan.trials) envs.set(spec.envKey, spec.taskDir);
  const toBuild = [...envs.values()].filter((dir) => existsSync(path.join(dir, 'environment', 'Dockerfile')));
  const tasks = new Set(plan.trials.map(({ spec }) => spec.taskName));
  const lines = [
    `plan: job ${job.name}: ${plan.trials.length} trials (${tasks.size} tasks × ${job.agents.length} agents × ` +
      `${job.n_attempts} attempts), ${job.n_concurrent_trials} at once, ${job.environment.type} environments`,
    job.environment.type === 'local'
      ? `environments: none to build (local: each trial runs as processes on this host; Dockerfiles are not used)`
      : `environments: ${envs.size} (${toBuild.length} to build from a Dockerfile, ${envs.size - toBuild.length} prebuilt images)`,
    ...plan.warnings.map((warning) => `warning: ${warning}`),
    'agents:',
  ];
  let totalTokens = 0;
  let totalCost: number | null = 0;
  for (const agent of job.agents) {
    const planned = plan.trials.filter(({ spec }) => spec.agentName === agent.name).map(({ spec }) => spec.taskName);
    if (!usesGateway(agent)) {
      lines.push(`  ${agent.name}: ${planned.length} trials · not on the model gateway: no model spend counted`);
      continue;
    }
    const measured = await measuredUsage(job, agent.name, agent.model ?? null);
    const model = agent.model ?? measured.model;
    const estimate = estimateAgent(planned, measured, model);
    totalTokens += estimate.tokens;
    totalCost = totalCost === null || estimate.costUsd === null ? null : totalCost + estimate.costUsd;
    const limits = agent.limits ? ` · limits per trial ${JSON.stringify(agent.limits)}` : '';
    lines.push(
      `  ${agent.name}: model ${model ?? 'unknown'} · ${estimate.trials} trials · ~${Math.round(estimate.tokens)} tokens · ` +
        `${formatCost(estimate.costUsd)} (${estimate.basis})${limits}`
    );
  }
  lines.push(`estimated cost: ${formatCost(totalCost)} · ~${Math.round(totalTokens)} tokens`);
  if (job.budget) {
    const over =
      (job.budget.cost_usd !== undefined && totalCost !== null && totalCost > job.budget.cost_usd) ||
      (job.budget.tokens !== undefined && totalTokens > job.budget.tokens);
    const unknown = job.budget.cost_usd !== undefined && totalCost === null;
    const verdict = over
      ? 'the estimate exceeds the budget (the job would stop when it is spent)'
      : unknown
        ? 'the cost is unknown (unpriced models): only `tokens` can be checked'
        : 'the estimate fits';
    lines.push(`budget: ${JSON.stringify(job.budget)}: ${verdict}`);
  }
  lines.push(`nothing was started (--dry-run); results would go to ${jobDirOf(job)}`);
  console.log(lines.join('\n'));
}

function estimateAgent(tasks: string[], measured: Measured, model: string | null): AgentEstimate {
  const all = [...measured.byTask.values()].flat();
  let tokens = 0;
  let costUsd: number | null = 0;
  let exact = 0;
  for (const task of tasks) {
    const usages = measured.byTask.get(task) ?? all;
    if (measured.byTask.has(task)) exact += 1;
    const mean = meanUsage(usages);
    if (mean) {
      tokens += mean.tokens;
      costUsd = costUsd === null || mean.costUsd === null ? null : costUsd + mean.costUsd;
      continue;
    }
    const price = model ? priceOf(model) : null;
    tokens += ASSUMED_TRIAL_USAGE.input_tokens + ASSUMED_TRIAL_USAGE.output_tokens;
    costUsd = costUsd === null || !price ? null : costUsd + callCost(price, ASSUMED_TRIAL_USAGE);
  }
  const basis =
    all.length === 0
      ? `assumed ${ASSUMED_TRIAL_USAGE.input_tokens} input + ${ASSUMED_TRIAL_USAGE.output_tokens} output tokens per ` +
        `trial at ${model && priceOf(model) ? 'list price' : 'no known price: unpriced'}`
      : `measured: ${all.length} earlier trials of the same agent and model, ${exact} of ${tasks.length} planned ` +
        'trials on the same tasks (the others at its mean)';
  return { trials: tasks.length, tokens, costUsd, basis };
}

function meanUsage(usages: TrialUsage[]): { tokens: number; costUsd: number | null } | null {
  if (usages.length === 0) return null;
  const tokens = usages.reduce((sum, u) => sum + u.input_tokens + u.output_tokens, 0) / usages.length;
  const costUsd = usages.some((u) => u.cost_usd === null)
    ? null
    : usages.reduce((sum, u) => sum + u.cost_usd!, 0) / usages.length;
  return { tokens, costUsd };
}

/** Earlier trials in jobs_dir of an agent of this name and model (as its job configured it), by task. */
async function measuredUsage(job: ResolvedJob, agentName: string, model: string | null): Promise<Measured> {
  const measured: Measured = { byTask: new Map(), model: null };
  const folders = (await ifPresent(readdir(job.jobs_dir, { withFileTypes: true }))) ?? [];
  for (const folder of folders.filter((entry) => entry.isDirectory())) {
    const jobDir = path.join(job.jobs_dir, folder.name);
    const config = await readJson<ResolvedJob>(jobFiles.config(jobDir));
    const agent = config?.agents?.find((a) => a.name === agentName);
    if (!agent || (agent.model ?? null) !== model) continue;
    for (const trial of await readJobTrials(jobDir)) {
      const usage = trial.result?.usage;
      if (trial.agentName !== agentName || !usage || usage.n_llm_calls === 0) continue;
      measured.byTask.set(trial.taskName, [...(measured.byTask.get(trial.taskName) ?? []), usage]);
      measured.model ??= await firstModel(trialLayout(jobFiles.trialDir(jobDir, trial.trialName)).agent);
    }
  }
  return measured;
}

async function firstModel(agentDir: string): Promise<string | null> {
  for await (const record of readCallRecords(path.join(agentDir, LLM_CALLS_FILE)))
    if (record.model) return record.model;
  return null;
}

function formatCost(cost: number | null): string {
  return cost === null ? 'cost unknown (unpriced model)' : `$${cost.toFixed(4)}`;
}
