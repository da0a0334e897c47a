/**
 * What the viewer reads from job folders, lazily (only the files a page needs) and again on every request, so pages
 * follow running jobs. Trial results are parsed once per change (src/results/job-folder.ts caches them by mtime).
 */
import { lstat, readdir } from 'node:fs/promises';
import path from 'node:path';

import { ifPresent } from '../files/absent';
import { readRegularHead } from '../files/no-follow';
import { jobFiles, readJson } from '../results/files';
import type { JobTrial } from '../results/job-folder';
import { readJobTrials } from '../results/job-folder';
import type { JobResult } from '../results/job-result';
import type { RewardMetrics } from '../results/job-stats';
import { addTrial, emptyStats, groupMetrics, primaryReward } from '../results/job-stats';
import type { MetricType } from '../contracts/job-config';
import { CANCELLED_ERROR, isScored } from '../contracts/trial';

/** The parts of config.json the viewer shows. */
export interface JobConfig {
  name: string;
  n_attempts?: number;
  metrics?: { type: MetricType }[];
  agents?: { name: string; model?: string }[];
  datasets?: ({ path: string } | { name: string })[];
}

export interface JobSummary {
  name: string;
  dir: string;
  config: JobConfig | undefined;
  result: JobResult | undefined;
}

/** Fields other parts of Rollout add to a trial result when they know them; none is required. */
export interface TrialUsage {
  n_llm_calls?: number;
  input_tokens?: number;
  output_tokens?: number;
  cached_tokens?: number;
  cost_usd?: number;
  /** Calls the gateway retried upstream (429, 503, 529, connection errors). */
  n_retried_calls?: number;
  /** Milliseconds calls waited at the gateway (rate limits, retries). */
  waited_ms?: number;
}
export interface TrialAgentInfo {
  name?: string;
  version?: string;
  model?: string;
}

export type TrialState = 'pending' | 'completed' | 'errored' | 'infrastructure' | 'cancelled';

export interface TrialRow extends JobTrial {
  state: TrialState;
  /** Primary reward: "reward", else the first key; null without rewards. */
  reward: number | null;
  errorType: string | null;
  seconds: number | null;
  usage: TrialUsage | undefined;
  agentInfo: TrialAgentInfo | undefined;
}

/** The job folders under `root`, or `root` itself when it is one. */
export async function findJobDirs(root: string): Promise<string[]> {
  if (await isJobDir(root)) return [path.resolve(root)];
  const entries = (await ifPresent(readdir(root, { withFileTypes: true }))) ?? [];
  const dirs: string[] = [];
  for (const entry of entries) {
    const dir = path.resolve(root, entry.name);
    if (entry.isDirectory() && (await isJobDir(dir))) dirs.push(dir);
  }
  return dirs.sort();
}

async function isJobDir(dir: string): Promise<boolean> {
  return (await ifPresent(lstat(jobFiles.config(dir))))?.isFile() ?? false;
}

export async function readJobSummary(dir: string): Promise<JobSummary> {
  const config = await readJson<JobConfig>(jobFiles.config(dir));
  const result = await readJson<JobResult>(jobFiles.result(dir));
  return { name: config?.name ?? path.basename(dir), dir, config, result };
}

/** Derived views, kept as long as the trials they came from (readJobTrials returns the same array until a change). */
const rowsOf = new WeakMap<readonly JobTrial[], TrialRow[]>();
const evalsCache = new WeakMap<readonly TrialRow[], EvalView[]>();
const matrixCache = new WeakMap<readonly TrialRow[], Matrix>();

export async function readTrialRows(jobDir: string): Promise<TrialRow[]> {
  const trials = await readJobTrials(jobDir);
  let rows = rowsOf.get(trials);
  if (!rows) rowsOf.set(trials, (rows = trials.map(toRow)));
  return rows;
}

function toRow(trial: JobTrial): TrialRow {
  const { result } = trial;
  const errorType = result?.error?.type ?? null;
  const extra = (result ?? {}) as { usage?: TrialUsage; agent?: TrialAgentInfo };
  const seconds = result ? (Date.parse(result.finished_at) - Date.parse(result.started_at)) / 1000 : null;
  return {
    ...trial,
    state: !result
      ? 'pending'
      : errorType === null
        ? 'completed'
        : errorType === CANCELLED_ERROR
          ? 'cancelled'
          : isScored(errorType)
            ? 'errored'
            : 'infrastructure',
    reward: result ? primaryReward(result.rewards) : null,
    errorType,
    seconds: seconds !== null && Number.isFinite(seconds) ? seconds : null,
    usage: extra.usage && typeof extra.usage === 'object' ? extra.usage : undefined,
    agentInfo: extra.agent && typeof extra.agent === 'object' ? extra.agent : undefined,
  };
}

export interface EvalView {
  key: string;
  agent: string;
  dataset: string;
  n_trials: number;
  n_errors: number;
  metrics: Record<string, RewardMetrics>;
}

/** Metrics per agent × dataset from the trials on disk, by the same code as the job's result.json. */
export function evalsOf(rows: readonly TrialRow[], metrics: readonly MetricType[]): EvalView[] {
  const cached = evalsCache.get(rows);
  if (cached) return cached;
  const stats = emptyStats(rows.length);
  for (const row of rows) {
    if (!row.result) continue;
    addTrial(stats, {
      trialId: row.trialName,
      trialName: row.trialName,
      taskName: row.taskName,
      datasetName: row.datasetName,
      agentName: row.agentName,
      attempt: row.attempt,
      rewards: row.result.rewards,
      error: row.result.error,
      hostQueue: null,
      builtImage: null,
      envKey: '',
    });
  }
  const evals = Object.entries(stats.groups).map(([key, group]) => ({
    key,
    agent: group.agent,
    dataset: group.dataset,
    n_trials: group.n_trials,
    n_errors: group.n_errors,
    metrics: groupMetrics(group, metrics),
  }));
  evalsCache.set(rows, evals);
  return evals;
}

export type ErrorLevel = 'task' | 'infrastructure' | 'cancelled';

export function errorLevel(type: string): ErrorLevel {
  if (type === CANCELLED_ERROR) return 'cancelled';
  // The model API's failures are outside the agent's control, as Rollout's own are.
  if (!isScored(type)) return 'infrastructure';
  // Every other type is the task's or the agent's (TASK_ERROR_TYPES, and any a newer Rollout adds).
  return 'task';
}

export interface TrialFilter {
  task?: string;
  agent?: string;
  /** An error type, "none" (no error) or "any". */
  error?: string;
  minReward?: number;
  maxReward?: number;
  /** Text in the trial name. */
  q?: string;
}

export function filterRows(rows: readonly TrialRow[], filter: TrialFilter): TrialRow[] {
  const q = filter.q?.toLowerCase();
  return rows.filter(
    (row) =>
      (!filter.task || row.taskName === filter.task) &&
      (!filter.agent || row.agentName === filter.agent) &&
      (!filter.error ||
        (filter.error === 'none'
          ? row.result !== null && row.errorType === null
          : filter.error === 'any'
            ? row.errorType !== null
            : row.errorType === filter.error)) &&
      (filter.minReward === undefined || (row.reward ?? 0) >= filter.minReward) &&
      (filter.maxReward === undefined || (row.reward ?? 0) <= filter.maxReward) &&
      (!q || row.trialName.toLowerCase().includes(q))
  );
}

export interface MatrixCell {
  /** Mean primary reward over the scored trials of the cell (no reward counts 0), null when none is scored. */
  mean: number | null;
  finished: number;
  total: number;
  errors: number;
}

export interface Matrix {
  tasks: string[];
  agents: string[];
  cells: Map<string, MatrixCell>;
}

/** Task × agent: one cell per pair. */
export function matrixOf(rows: readonly TrialRow[]): Matrix {
  const cached = matrixCache.get(rows);
  if (cached) return cached;
  const cells = new Map<string, MatrixCell & { sum: number; scored: number }>();
  const tasks = new Set<string>();
  const agents = new Set<string>();
  for (const row of rows) {
    tasks.add(row.taskName);
    agents.add(row.agentName);
    const key = cellKey(row.taskName, row.agentName);
    const cell = cells.get(key) ?? { mean: null, finished: 0, total: 0, errors: 0, sum: 0, scored: 0 };
    cells.set(key, cell);
    cell.total += 1;
    if (!row.result) continue;
    cell.finished += 1;
    if (row.errorType) cell.errors += 1;
    if (row.state === 'completed' || row.state === 'errored') {
      cell.scored += 1;
      cell.sum += row.reward ?? 0;
      cell.mean = cell.sum / cell.scored;
    }
  }
  const matrix = { tasks: [...tasks].sort(), agents: [...agents].sort(), cells };
  matrixCache.set(rows, matrix);
  return matrix;
}

export function cellKey(task: string, agent: string): string {
  return `${task}\u0000${agent}`;
}

export interface UsageTotals extends Required<TrialUsage> {
  trials: number;
  models: string[];
}

const USAGE_FIELDS = [
  'n_llm_calls',
  'input_tokens',
  'output_tokens',
  'cached_tokens',
  'cost_usd',
  'n_retried_calls',
  'waited_ms',
] as const;
type UsageField = (typeof USAGE_FIELDS)[number];

/** Usage and cost per agent, over the trials that recorded them. */
export function usageByAgent(rows: readonly TrialRow[]): Map<string, UsageTotals> {
  const totals = new Map<string, UsageTotals>();
  for (const row of rows) {
    if (!row.usage) continue;
    const zeros = Object.fromEntries(USAGE_FIELDS.map((field) => [field, 0])) as Record<UsageField, number>;
    const total = totals.get(row.agentName) ?? { trials: 0, models: [], ...zeros };
    totals.set(row.agentName, total);
    total.trials += 1;
    for (const field of USAGE_FIELDS) {
      const value = row.usage[field];
      if (typeof value === 'number' && Number.isFinite(value)) total[field] += value;
    }
    const model = row.agentInfo?.model;
    if (model && !total.models.includes(model)) total.models.push(model);
  }
  return totals;
}

/** A file shown in part: its first `limit` bytes, and its size (a regular file only, never through a link). */
export const readHead = readRegularHead;

/** Files of a trial folder, relative paths, depth-first, without following links. */
export async function trialFiles(trialDir: string): Promise<{ path: string; size: number }[]> {
  const files: { path: string; size: number }[] = [];
  const walk = async (relative: string) => {
    const entries = (await ifPresent(readdir(path.join(trialDir, relative), { withFileTypes: true }))) ?? [];
    for (const entry of entries.sort((a, b) => a.name.localeCompare(b.name))) {
      const child = relative ? `${relative}/${entry.name}` : entry.name;
      if (entry.isDirectory()) await walk(child);
      else if (entry.isFile()) {
        const info = await ifPresent(lstat(path.join(trialDir, child)));
        if (info?.isFile()) files.push({ path: child, size: info.size });
      }
    }
  };
  await walk('');
  return files;
}
