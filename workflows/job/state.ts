/**
 * What a Job workflow knows, and nothing it does: the counts so far, the running trials, the environments they use,
 * and what is carried across continue-as-new. Pure code (no workflow APIs, times passed in), so it reads and tests
 * alone; the workflow modules beside it act on it.
 */
import type { EnvironmentType, MetricType } from '../../src/contracts/job-config';
import type { JobResult } from '../../src/results/job-result';
import { buildJobResult } from '../../src/results/job-result';
import type { JobStats } from '../../src/results/job-stats';
import { addTrial, emptyStats, finishedCount, primaryReward } from '../../src/results/job-stats';
import type { TrialSpec, TrialSummary } from '../../src/contracts/trial';
import { isScored } from '../../src/contracts/trial';
import type { JobControlState, JobProgress, RunningTrialInfo } from '../messages';

export interface JobInput {
  jobName: string;
  jobDir: string;
  totalTrials: number;
  concurrency: number;
  metrics: MetricType[];
  environmentType: EnvironmentType;
  /** Remove images the job built once no trial needs them (`environment.delete`). */
  deleteImages: boolean;
  /** Finished trials whose error is one of these run again. */
  rerunErrorTypes: string[];
  /** job.yaml `policy_version`: the first value of the control state's. */
  policyVersion?: number;
  pageSize?: number;
  /** Continue-as-new once history passes this many events (Temporal's hard limit is 51,200). */
  maxHistoryEvents?: number;
  /** How often the job checks on running trials that did not report back (default 2 minutes). */
  reconcileIntervalSec?: number;
  /**
   * With job.yaml `budget`: its ledger workflow (src/budget/workflow/ledger.ts) keeps the spend; `exhausted`: it was
   * spent when the job started. Absent in jobs without a budget (and all started before budgets).
   */
  budget?: { exhausted: boolean };
  /** State carried across continue-as-new. */
  carried?: JobCarry;
}

export interface EnvUsage {
  running: number;
  /** The plan cursor has passed this environment's last trial: no more trials will need it. */
  dispatched: boolean;
  /**
   * Host queue → image Rollout built there for this environment. A second image of the environment on the same queue
   * (a provider whose images depend on the trial's size: Daytona snapshots) is keyed `<host queue>\n<image>`.
   */
  images: Record<string, string>;
}

export interface JobCarry {
  cursor: number;
  startedAt: string;
  stats: JobStats;
  scoredRewardSum: number;
  scoredRewardCount: number;
  running: Record<string, RunningTrial>;
  envs: Record<string, EnvUsage>;
  /** Signals from trials this run did not start (an earlier run did): counted when the plan reaches them. */
  late: Record<string, TrialSummary>;
  continuedAsNew: number;
  /** The budget is spent (as the ledger last said): no trial starts. */
  budgetExhausted?: boolean;
  /** Set by `rollout ctl` (absent in runs carried before it existed: job.yaml's concurrency, not paused). */
  control?: JobControlState;
}

/** What the job keeps of a running trial: enough to count it should it end without reporting back. */
export type RunningTrial = RunningTrialInfo &
  Pick<TrialSummary, 'envKey'> &
  Partial<Pick<TrialSummary, 'taskName' | 'datasetName' | 'agentName' | 'attempt'>>;

export class JobState {
  status: JobProgress['status'] = 'running';
  /** Counts changed since the result was last written. */
  dirty = true;
  /** Trials whose start is not confirmed yet: the free slots are filled in one workflow task, not one each. */
  readonly starting = new Map<string, Promise<void>>();
  readonly carry: JobCarry;

  constructor(
    private readonly input: JobInput,
    private readonly workflowId: string,
    now: string
  ) {
    this.carry = input.carried ?? {
      cursor: 0,
      startedAt: now,
      stats: emptyStats(input.totalTrials),
      scoredRewardSum: 0,
      scoredRewardCount: 0,
      running: {},
      envs: {},
      late: {},
      continuedAsNew: 0,
      ...(input.budget ? { budgetExhausted: input.budget.exhausted } : {}),
    };
    this.carry.control ??= {
      paused: false,
      concurrency: input.concurrency,
      ...(input.policyVersion !== undefined ? { policy_version: input.policyVersion } : {}),
    };
  }

  /** Live control's state (`rollout ctl`): the window reads it at every start. */
  get control(): JobControlState {
    return this.carry.control!;
  }

  /** A trial may start: not paused and a slot free. */
  get slotFree(): boolean {
    return !this.control.paused && this.runningCount < this.control.concurrency;
  }

  /** The Job workflow's "current details" in the Temporal UI. */
  details(): string {
    const { paused, concurrency } = this.control;
    return (
      `**${this.input.jobName}**: ${finishedCount(this.carry.stats)}/${this.input.totalTrials} finished, ` +
      `${this.runningCount} running · ${paused ? 'paused (no trial starts)' : `concurrency ${concurrency}`}`
    );
  }

  get runningCount(): number {
    return Object.keys(this.carry.running).length;
  }

  running(trialId: string): RunningTrial | undefined {
    return this.carry.running[trialId];
  }

  runningTrials(): RunningTrial[] {
    return Object.values(this.carry.running);
  }

  /** The environment a planned trial uses, known from its first trial on. */
  env(envKey: string): EnvUsage {
    return (this.carry.envs[envKey] ??= { running: 0, dispatched: false, images: {} });
  }

  /** A trial's summary that came before the plan reached it (taken: counted once). */
  takeLate(trialId: string): TrialSummary | undefined {
    const late = this.carry.late[trialId];
    delete this.carry.late[trialId];
    return late;
  }

  count(summary: TrialSummary): void {
    addTrial(this.carry.stats, summary);
    const reward = primaryReward(summary.rewards);
    // As the job's statistics count them: API failures and a refusal by the spent budget are not scored either.
    const scored = isScored(summary.error?.type);
    if (scored) {
      this.carry.scoredRewardSum += reward ?? 0;
      this.carry.scoredRewardCount += 1;
    }
    this.dirty = true;
  }

  /** `env`: the trial's environment as taken before its start (`env(spec.envKey)`). */
  trialStarted(spec: TrialSpec, env: EnvUsage, startedAt: string): void {
    env.running += 1;
    this.carry.running[spec.trialId] = {
      trialId: spec.trialId,
      trialName: spec.trialName,
      startedAt,
      envKey: spec.envKey,
      taskName: spec.taskName,
      datasetName: spec.datasetName,
      agentName: spec.agentName,
      attempt: spec.attempt,
    };
  }

  /** A trial ended: by its signal or, when none came, found by reconcile. */
  trialEnded(summary: TrialSummary): void {
    const running = this.carry.running[summary.trialId];
    if (!running) {
      this.carry.late[summary.trialId] = summary;
      return;
    }
    delete this.carry.running[summary.trialId];
    this.count(summary);
    const env = this.carry.envs[running.envKey];
    if (env) {
      env.running -= 1;
      // Summaries of older trials name one image; newer ones every image of every host the trial ran on.
      const images =
        summary.builtImages ??
        (summary.builtImage && summary.hostQueue ? [{ hostQueue: summary.hostQueue, image: summary.builtImage }] : []);
      for (const { hostQueue, image } of images) {
        const known = env.images[hostQueue];
        env.images[known === undefined || known === image ? hostQueue : `${hostQueue}\n${image}`] = image;
      }
    }
  }

  /** No more trials will run (the job was cancelled): every environment no trial still holds may go. */
  dispatchedAll(): void {
    for (const env of Object.values(this.carry.envs)) env.dispatched = true;
  }

  /**
   * Environments no remaining trial needs, each taken out of the state when the caller reaches it (so one that
   * becomes free while the caller removes an earlier one's images is still found).
   */
  *releasable(): Generator<EnvUsage> {
    for (const [envKey, env] of Object.entries(this.carry.envs)) {
      if (!env.dispatched || env.running > 0) continue;
      delete this.carry.envs[envKey];
      yield env;
    }
  }

  result(now: string): JobResult {
    return buildJobResult({
      jobName: this.input.jobName,
      workflowId: this.workflowId,
      status: this.status,
      startedAt: this.carry.startedAt,
      now,
      running: this.runningCount,
      stats: this.carry.stats,
      metrics: this.input.metrics,
      control: this.control,
    });
  }

  progress(now: string): JobProgress {
    const { stats, scoredRewardSum, scoredRewardCount } = this.carry;
    const result = this.result(now);
    return {
      jobName: this.input.jobName,
      status: this.status,
      total: this.input.totalTrials,
      finished: finishedCount(stats),
      running: this.runningCount,
      completed: stats.n_completed,
      errored: stats.n_errored,
      cancelled: stats.n_cancelled,
      infrastructureErrors: stats.n_infrastructure_errors,
      errorsByType: { ...stats.errors_by_type },
      meanReward: scoredRewardCount > 0 ? scoredRewardSum / scoredRewardCount : null,
      runningTrials: this.runningTrials().map(({ trialId, trialName, startedAt }) => ({
        trialId,
        trialName,
        startedAt,
      })),
      continuedAsNew: this.carry.continuedAsNew,
      evals: result.evals,
      usageByAgent: result.usage_by_agent,
      control: { ...this.control },
    };
  }

  /** The input of the next run after continue-as-new. */
  continued(): JobInput {
    return { ...this.input, carried: { ...this.carry, continuedAsNew: this.carry.continuedAsNew + 1 } };
  }
}
