/** A job's page: metrics, errors, usage, then the task × agent matrix, comparisons and trials (job-sections.ts). */
import type { JobBudgetResult } from '../../budget/workflow/spend';
import type { RewardMetrics } from '../../results/job-stats';
import { TOO_FEW_TASKS_NOTE, lacksInterval } from '../../results/statistics';
import { jobCharts } from '../charts/job';
import type { EvalView, JobSummary, TrialFilter, TrialRow, UsageTotals } from '../data';
import { errorLevel } from '../data';
import type { LinkContext, VNode } from '../html';
import { document, fmt, html } from '../html';
import { compareSection, matrixSection, trialsSection } from './job-sections';
import { time } from './shared';

export interface JobPageData {
  job: JobSummary;
  rows: TrialRow[];
  evals: EvalView[];
  filter: TrialFilter;
  /** Rows after the filter, and the page of them shown (a bundle shows all). */
  filtered: TrialRow[];
  page: number;
  matrixPage: number;
  usage: Map<string, UsageTotals>;
  /** Other jobs and their agents, for comparing across jobs. */
  otherJobs: { name: string; agents: string[] }[];
}

export function jobPage(ctx: LinkContext, data: JobPageData): string {
  const { job, rows } = data;
  const r = job.result;
  const agents = [...new Set(rows.map((row) => row.agentName))].sort();
  const finished = rows.filter((row) => row.result).length;
  const errors = new Map<string, number>();
  for (const row of rows) if (row.errorType) errors.set(row.errorType, (errors.get(row.errorType) ?? 0) + 1);
  return document(
    job.name,
    ctx,
    html`<section>
      <nav class="crumbs"><a href=${ctx.href([])}>jobs</a> / ${job.name}</nav>
      <h1>${job.name} <span class=${`status ${r?.status ?? 'pending'}`}>${r?.status ?? 'starting'}</span></h1>
      <p class="summary">
        <progress max=${rows.length || 1} value=${finished}></progress> ${finished}/${rows.length} trials finished ·
        started ${time(r?.started_at)} · ${r?.finished_at ? `finished ${time(r.finished_at)}` : 'not finished'}
        ${job.config?.n_attempts ? ` · ${job.config.n_attempts} attempt${job.config.n_attempts > 1 ? 's' : ''} per task` : ''}
        ${controlNote(r)}
      </p>
      <h2>Metrics</h2>
      ${metricsTable(data.evals)}
      <p class="note">
        n: trials the key is summarised over · 95% CI: Wilson interval clustered by task for rewards of only 0 or 1, a
        bootstrap over tasks otherwise (docs/results.md) · pass@k: unbiased estimator (Chen et al. 2021), a trial passes
        at reward ≥ 1 · infrastructure and model API errors and cancellations are not scored.
        ${lacksInterval(data.evals.flatMap((e) => Object.values(e.metrics))) ? html`<br /><span id="too-few-tasks">${TOO_FEW_TASKS_NOTE}</span>` : null}
      </p>
      ${jobCharts(rows, data.evals, data.usage, Date.now())} ${errorsSection(ctx, job.name, errors)}
      ${usageSection(data.usage)} ${budgetSection(r?.budget)}
      <h2>Tasks × agents</h2>
      ${matrixSection(ctx, job.name, rows, data.matrixPage)} ${compareSection(ctx, job.name, agents, data.otherJobs)}
      <h2 id="trials">Trials</h2>
      ${trialsSection(ctx, { ...data, jobName: job.name }, agents, [...errors.keys()].sort())}
    </section>`,
    { refresh: r?.status === 'running' }
  );
}

/** Live control (`rollout ctl`) while the job runs: paused, and the concurrency in force. */
function controlNote(result: JobSummary['result']): VNode | null {
  if (result?.status !== 'running' || !result.control) return null;
  const { paused, n_concurrent_trials } = result.control;
  return html`<span id="control">
    · ${paused ? html`<strong class="status paused">paused</strong> (no trial starts; rollout ctl … resume) · ` : ''}
    concurrency ${n_concurrent_trials}</span
  >`;
}

function metricsTable(evals: EvalView[]): VNode {
  const all = evals.flatMap((e) => Object.values(e.metrics));
  const maxK = Math.max(0, ...all.map((m) => Object.keys(m.pass_at_k ?? {}).length));
  const ks = Array.from({ length: maxK }, (_, i) => String(i + 1));
  const others = (['sum', 'min', 'max'] as const).filter((name) => all.some((m) => m[name] !== undefined));
  return html`<table class="sortable" id="metrics">
    <thead>
      <tr>
        <th>agent</th>
        <th>dataset</th>
        <th>reward key</th>
        <th data-sort-method="number">n</th>
        <th data-sort-method="number">trials</th>
        <th data-sort-method="number">errors</th>
        <th data-sort-method="number">mean</th>
        <th data-sort-method="none">95% CI</th>
        ${others.map((name) => html`<th data-sort-method="number">${name}</th>`)}
        ${ks.map((k) => html`<th data-sort-method="number">pass@${k}</th>`)}
      </tr>
    </thead>
    <tbody>
      ${evals.flatMap((e) =>
        Object.entries(e.metrics).map(
          ([key, m]: [string, RewardMetrics]) =>
            html`<tr>
              <td>${e.agent}</td>
              <td>${e.dataset}</td>
              <td>${key}</td>
              <td>${m.n}</td>
              <td>${e.n_trials}</td>
              <td>${e.n_errors}</td>
              <td class="num">${fmt(m.mean)}</td>
              <td class="ci">${m.ci95 ? `[${fmt(m.ci95[0])}, ${fmt(m.ci95[1])}]` : '–'} ${interval(m)}</td>
              ${others.map((name) => html`<td class="num">${fmt(m[name])}</td>`)}
              ${ks.map((k) => html`<td class="num">${fmt(m.pass_at_k?.[k])}</td>`)}
            </tr>`
        )
      )}
    </tbody>
  </table>`;
}

/** The interval drawn on a 0–1 scale (clipped for display only), with the mean as a tick. */
function interval(m: RewardMetrics): VNode | null {
  if (!m.ci95) return null;
  const clip = (x: number) => Math.max(0, Math.min(1, x)) * 100;
  const [low, high] = m.ci95;
  return html`<span class="interval" title=${`mean ${fmt(m.mean)}, 95% CI [${fmt(low)}, ${fmt(high)}]`}>
    <span class="range" style=${`left:${clip(low)}%;width:${clip(high) - clip(low)}%`}></span>
    <span class="tick" style=${`left:${clip(m.mean)}%`}></span>
  </span>`;
}

function errorsSection(ctx: LinkContext, jobName: string, errors: Map<string, number>): VNode {
  const levels = [
    ['task', 'Task errors (scored: no reward counts 0)'],
    ['infrastructure', 'Infrastructure and model API errors (not scored)'],
    ['cancelled', 'Cancelled (not scored)'],
  ] as const;
  return html`<div id="errors">
    <h2>Errors</h2>
    ${
      errors.size === 0
        ? html`<p>None.</p>`
        : levels.map(([level, title]) => {
            const types = [...errors].filter(([type]) => errorLevel(type) === level);
            return types.length === 0
              ? null
              : html`<div class=${`errors ${level}`}>
                  <h3>${title}</h3>
                  <ul>
                    ${types.map(
                      ([type, n]) =>
                        html`<li>
                          <a href=${ctx.href(['jobs', jobName], { error: type }) + '#trials'}>${type}</a> ×${n}
                        </li>`
                    )}
                  </ul>
                </div>`;
          })
    }
  </div>`;
}

/** Spend against job.yaml `budget` (from the job's ledger, as of the last result write), in all and per agent. */
function budgetSection(budget: JobBudgetResult | undefined): VNode | null {
  if (!budget) return null;
  const { limits, spent } = budget;
  const share = (value: number, limit: number | undefined) =>
    limit === undefined ? '' : ` of ${fmt(limit, 4)} (${fmt((100 * value) / limit, 1)}%)`;
  const unpriced =
    spent.unpriced_tokens > 0
      ? ` · ${spent.unpriced_tokens} tokens unpriced (${spent.unpriced_models.join(', ')})`
      : '';
  const spentLine =
    `spent $${fmt(spent.cost_usd, 4)}${share(spent.cost_usd, limits.cost_usd)} · ` +
    `${spent.tokens} tokens${share(spent.tokens, limits.tokens)} · ${spent.llm_calls} calls${unpriced}`;
  return html`<div id="budget">
    <h2>Budget</h2>
    <p class="summary">
      ${spentLine}
      ${budget.exhausted ? html`<br /><strong>Budget spent (${budget.exhausted}): no new trial starts.</strong>` : null}
    </p>
    <table class="sortable">
      <thead>
        <tr>
          <th>agent</th>
          <th data-sort-method="number">cost (USD)</th>
          <th data-sort-method="number">tokens</th>
          <th data-sort-method="number">LLM calls</th>
          <th data-sort-method="number">unpriced tokens</th>
        </tr>
      </thead>
      <tbody>
        ${Object.entries(budget.spent_by_agent).map(
          ([agent, s]) =>
            html`<tr>
              <td>${agent}</td>
              <td>${fmt(s.cost_usd, 4)}</td>
              <td>${s.tokens}</td>
              <td>${s.llm_calls}</td>
              <td>${s.unpriced_tokens}</td>
            </tr>`
        )}
      </tbody>
    </table>
  </div>`;
}

function usageSection(usage: Map<string, UsageTotals>): VNode | null {
  if (usage.size === 0) return null;
  return html`<div id="usage">
    <h2>Usage and cost</h2>
    <table class="sortable">
      <thead>
        <tr>
          <th>agent</th>
          <th>models</th>
          <th data-sort-method="number">trials</th>
          <th data-sort-method="number">LLM calls</th>
          <th data-sort-method="number" title="calls the gateway retried upstream (429, 503, 529, connection errors)">
            retried
          </th>
          <th data-sort-method="number" title="time calls waited at the gateway: rate limits, retry backoff">
            waited (s)
          </th>
          <th data-sort-method="number">input tokens</th>
          <th data-sort-method="number">cached</th>
          <th data-sort-method="number">output tokens</th>
          <th data-sort-method="number">cost (USD)</th>
          <th data-sort-method="number">cost per trial</th>
        </tr>
      </thead>
      <tbody>
        ${[...usage].map(
          ([agent, u]) =>
            html`<tr>
              <td>${agent}</td>
              <td>${u.models.join(', ') || '–'}</td>
              <td>${u.trials}</td>
              <td>${u.n_llm_calls}</td>
              <td>${u.n_retried_calls}</td>
              <td class="num">${fmt(u.waited_ms / 1000, 1)}</td>
              <td>${u.input_tokens}</td>
              <td>${u.cached_tokens}</td>
              <td>${u.output_tokens}</td>
              <td>${fmt(u.cost_usd, 4)}</td>
              <td>${fmt(u.cost_usd / u.trials, 4)}</td>
            </tr>`
        )}
      </tbody>
    </table>
  </div>`;
}
