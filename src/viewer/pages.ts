/** The viewer's pages: jobs, a job, a comparison of two agents, a trial. Pure rendering of data read in data.ts. */
import type { RewardMetrics } from '../results/job-stats';
import { meanEstimate } from '../results/statistics';
import { STEPS } from '../trial/types';
import type { StepTiming, TaskStepResult } from '../trial/types';
import type { EvalView, JobSummary, TrialFilter, TrialRow, UsageTotals } from './data';
import { cellKey, errorLevel, matrixOf } from './data';
import type { LinkContext, VNode } from './html';
import { bytes, document, fmt, html, rewardColour } from './html';
import type { Trajectory } from './trajectory';
import { TrajectoryView } from './trajectory';

export const TRIALS_PER_PAGE = 100;
export const MATRIX_TASKS_PER_PAGE = 200;

// ---------------------------------------------------------------------------------------------------------------
// Jobs

export function jobsPage(ctx: LinkContext, root: string, jobs: JobSummary[]): string {
  const running = jobs.some((job) => job.result?.status === 'running');
  return document(
    'Jobs',
    ctx,
    html`<section>
      <h1>Jobs <span class="muted">in ${root}</span></h1>
      ${
        jobs.length === 0
          ? html`<p>No job folders here yet.</p>`
          : html`<table class="sortable" id="jobs">
              <thead>
                <tr>
                  <th>job</th>
                  <th>status</th>
                  <th data-sort-method="number">progress</th>
                  <th data-sort-method="number">completed</th>
                  <th data-sort-method="number">errored</th>
                  <th data-sort-method="number">infrastructure</th>
                  <th data-sort-method="number">cancelled</th>
                  <th>errors by type</th>
                  <th>started</th>
                  <th>finished</th>
                  <th>agents</th>
                  <th>datasets</th>
                </tr>
              </thead>
              <tbody>
                ${jobs.map((job) => {
                  const r = job.result;
                  const total = r?.n_total_trials ?? 0;
                  const finished = r?.n_finished_trials ?? 0;
                  return html`<tr>
                    <td><a href=${ctx.href(['jobs', job.name])}>${job.name}</a></td>
                    <td><span class=${`status ${r?.status ?? 'pending'}`}>${r?.status ?? 'starting'}</span></td>
                    <td data-sort=${total ? finished / total : 0}>
                      <progress max=${total || 1} value=${finished}></progress> ${finished}/${total}
                    </td>
                    <td>${r?.n_completed_trials ?? 0}</td>
                    <td>${r?.n_errored_trials ?? 0}</td>
                    <td>${r?.n_infrastructure_errors ?? 0}</td>
                    <td>${r?.n_cancelled_trials ?? 0}</td>
                    <td>
                      ${Object.entries(r?.errors_by_type ?? {}).map(
                        ([type, n]) => html`<span class=${`chip ${errorLevel(type)}`}>${type} ×${n}</span> `
                      )}
                    </td>
                    <td>${time(r?.started_at)}</td>
                    <td>${time(r?.finished_at)}</td>
                    <td>${(job.config?.agents ?? []).map((a) => a.name).join(', ')}</td>
                    <td>${(job.config?.datasets ?? []).map(datasetName).join(', ')}</td>
                  </tr>`;
                })}
              </tbody>
            </table>`
      }
    </section>`,
    { refresh: running }
  );
}

function datasetName(dataset: { path: string } | { name: string }): string {
  return 'path' in dataset ? (dataset.path.split('/').filter(Boolean).pop() ?? dataset.path) : dataset.name;
}

function time(iso: string | null | undefined): string {
  return iso ? iso.replace('T', ' ').replace(/\.\d+Z$/, 'Z') : '–';
}

// ---------------------------------------------------------------------------------------------------------------
// A job

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
      </p>
      <h2>Metrics</h2>
      ${metricsTable(data.evals)}
      <p class="note">
        n: trials the key is summarised over · ci95: 95% t-interval of the mean, clustered by task · pass@k: unbiased
        estimator (Chen et al. 2021), a trial passes at reward ≥ 1 · infrastructure and model API errors and
        cancellations are not scored.
      </p>
      ${errorsSection(ctx, job.name, errors)} ${usageSection(data.usage)}
      <h2>Tasks × agents</h2>
      ${matrixSection(ctx, job.name, rows, data.matrixPage)} ${compareSection(ctx, job.name, agents, data.otherJobs)}
      <h2 id="trials">Trials</h2>
      ${trialsSection(ctx, data, agents, [...errors.keys()].sort())}
    </section>`,
    { refresh: r?.status === 'running' }
  );
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

function matrixSection(ctx: LinkContext, jobName: string, rows: TrialRow[], page: number): VNode {
  const { tasks, agents, cells } = matrixOf(rows);
  const pages = Math.max(1, Math.ceil(tasks.length / MATRIX_TASKS_PER_PAGE));
  const current = ctx.live ? Math.min(Math.max(1, page), pages) : 1;
  const shown = ctx.live ? tasks.slice((current - 1) * MATRIX_TASKS_PER_PAGE, current * MATRIX_TASKS_PER_PAGE) : tasks;
  return html`<div>
    <table class="sortable matrix" id="matrix">
      <thead>
        <tr>
          <th>task</th>
          ${agents.map((agent) => html`<th data-sort-method="number">${agent}</th>`)}
        </tr>
      </thead>
      <tbody>
        ${shown.map(
          (task) =>
            html`<tr>
              <td>${task}</td>
              ${agents.map((agent) => {
                const cell = cells.get(cellKey(task, agent));
                if (!cell) return html`<td data-sort="-1"></td>`;
                return html`<td
                  class="cell"
                  data-sort=${cell.mean ?? -1}
                  style=${`background:${rewardColour(cell.mean)}`}
                  title=${`${task} · ${agent}: mean ${fmt(cell.mean)}, ${cell.finished}/${cell.total} finished, ${cell.errors} errors`}
                >
                  <a href=${ctx.href(['jobs', jobName], { task, agent }) + '#trials'}
                    >${fmt(cell.mean, 2)}${cell.errors ? html`<sup>!${cell.errors}</sup>` : null}</a
                  >
                  <span class="muted small"> ${cell.finished}/${cell.total}</span>
                </td>`;
              })}
            </tr>`
        )}
      </tbody>
    </table>
    ${pages > 1 && ctx.live ? pager(ctx, 'matrix-pager', ['jobs', jobName], {}, 'mpage', current, pages) : null}
  </div>`;
}

function compareSection(
  ctx: LinkContext,
  jobName: string,
  agents: string[],
  otherJobs: { name: string; agents: string[] }[]
): VNode | null {
  const pairs: [string, string][] = [];
  for (let i = 0; i < agents.length; i++)
    for (let j = i + 1; j < agents.length; j++) pairs.push([agents[i]!, agents[j]!]);
  const choices = [
    ...agents.map((agent) => `${jobName}/${agent}`),
    ...otherJobs.flatMap((job) => job.agents.map((agent) => `${job.name}/${agent}`)),
  ];
  if (choices.length < 2) return null;
  return html`<div id="compare">
    <h2>Compare</h2>
    <ul class="pairs">
      ${pairs.map(([a, b]) => html`<li><a href=${ctx.href(['compare', jobName, a, jobName, b])}>${a} vs ${b}</a></li>`)}
    </ul>
    ${
      ctx.live
        ? html`<form method="get" action=${ctx.href(['compare'])} class="inline">
            <select name="a">
              ${choices.map((c, i) => html`<option value=${c} selected=${i === 0}>${c}</option>`)}
            </select>
            vs
            <select name="b">
              ${choices.map((c, i) => html`<option value=${c} selected=${i === 1}>${c}</option>`)}
            </select>
            <button type="submit">Compare</button>
          </form>`
        : null
    }
  </div>`;
}

function trialsSection(ctx: LinkContext, data: JobPageData, agents: string[], errorTypes: string[]): VNode {
  const { filter, filtered, job } = data;
  const pages = Math.max(1, Math.ceil(filtered.length / TRIALS_PER_PAGE));
  const current = ctx.live ? Math.min(Math.max(1, data.page), pages) : 1;
  const shown = ctx.live ? filtered.slice((current - 1) * TRIALS_PER_PAGE, current * TRIALS_PER_PAGE) : filtered;
  const tasks = [...new Set(data.rows.map((row) => row.taskName))].sort();
  const query = filterQuery(filter);
  return html`<div>
    ${
      ctx.live
        ? html`<form method="get" action=${ctx.href(['jobs', job.name]) + '#trials'} class="filters" id="filters">
            <label>search <input name="q" value=${filter.q ?? ''} placeholder="trial name" /></label>
            <label
              >task
              <select name="task">
                <option value="">all</option>
                ${tasks.map((t) => html`<option value=${t} selected=${filter.task === t}>${t}</option>`)}
              </select></label
            >
            <label
              >agent
              <select name="agent">
                <option value="">all</option>
                ${agents.map((a) => html`<option value=${a} selected=${filter.agent === a}>${a}</option>`)}
              </select></label
            >
            <label
              >error
              <select name="error">
                <option value="">all</option>
                <option value="none" selected=${filter.error === 'none'}>no error</option>
                <option value="any" selected=${filter.error === 'any'}>any error</option>
                ${errorTypes.map((t) => html`<option value=${t} selected=${filter.error === t}>${t}</option>`)}
              </select></label
            >
            <label>reward ≥ <input name="min" size="4" value=${filter.minReward ?? ''} /></label>
            <label>≤ <input name="max" size="4" value=${filter.maxReward ?? ''} /></label>
            <button type="submit">Filter</button>
            <a href=${ctx.href(['jobs', job.name]) + '#trials'}>clear</a>
          </form>`
        : null
    }
    <p class="muted" id="trial-count">
      ${filtered.length} of ${data.rows.length} trials${pages > 1 ? ` · page ${current} of ${pages}` : ''}
    </p>
    <table class="sortable" id="trial-table">
      <thead>
        <tr>
          <th>trial</th>
          <th>task</th>
          <th>agent</th>
          <th data-sort-method="number">attempt</th>
          <th>state</th>
          <th data-sort-method="number">reward</th>
          <th>rewards</th>
          <th>error</th>
          <th data-sort-method="number">seconds</th>
          <th data-sort-method="number">cost</th>
        </tr>
      </thead>
      <tbody>
        ${shown.map(
          (row) =>
            html`<tr class=${`trial ${row.state}`}>
              <td><a href=${ctx.href(['jobs', job.name, 'trials', row.trialName])}>${row.trialName}</a></td>
              <td>${row.taskName}</td>
              <td>${row.agentName}</td>
              <td>${row.attempt}</td>
              <td>${row.state}</td>
              <td
                class="num"
                data-sort=${row.reward ?? -1}
                style=${`background:${rewardColour(row.result ? (row.reward ?? 0) : null)}`}
              >
                ${fmt(row.reward)}
              </td>
              <td class="small">${row.result?.rewards ? JSON.stringify(row.result.rewards) : '–'}</td>
              <td>
                ${row.errorType ? html`<span class=${`chip ${errorLevel(row.errorType)}`}>${row.errorType}</span>` : ''}
              </td>
              <td class="num">${fmt(row.seconds, 1)}</td>
              <td class="num">${fmt(row.usage?.cost_usd, 4)}</td>
            </tr>`
        )}
      </tbody>
    </table>
    ${pages > 1 && ctx.live ? pager(ctx, 'trial-pager', ['jobs', job.name], query, 'page', current, pages, '#trials') : null}
  </div>`;
}

export function filterQuery(filter: TrialFilter): Record<string, string | number | undefined> {
  return {
    q: filter.q,
    task: filter.task,
    agent: filter.agent,
    error: filter.error,
    min: filter.minReward,
    max: filter.maxReward,
  };
}

function pager(
  ctx: LinkContext,
  id: string,
  segments: string[],
  query: Record<string, string | number | undefined>,
  param: string,
  current: number,
  pages: number,
  anchor = ''
): VNode {
  const numbers = [...new Set([1, current - 2, current - 1, current, current + 1, current + 2, pages])]
    .filter((n) => n >= 1 && n <= pages)
    .sort((a, b) => a - b);
  const link = (n: number, label: string) =>
    html`<a class=${n === current ? 'current' : ''} href=${ctx.href(segments, { ...query, [param]: n }) + anchor}
      >${label}</a
    >`;
  return html`<nav class="pager" id=${id}>
    ${current > 1 ? link(current - 1, '‹ previous') : null} ${numbers.map((n) => link(n, String(n)))}
    ${current < pages ? link(current + 1, 'next ›') : null}
  </nav>`;
}

// ---------------------------------------------------------------------------------------------------------------
// Comparison

export interface CompareSide {
  job: string;
  agent: string;
  rows: TrialRow[];
}

interface TaskOutcome {
  mean: number | null;
  scored: number;
  total: number;
}

function outcomesByTask(side: CompareSide): Map<string, TaskOutcome> {
  const byTask = new Map<string, TaskOutcome & { sum: number }>();
  for (const row of side.rows) {
    if (row.agentName !== side.agent) continue;
    const outcome = byTask.get(row.taskName) ?? { mean: null, scored: 0, total: 0, sum: 0 };
    byTask.set(row.taskName, outcome);
    outcome.total += 1;
    if (row.state !== 'completed' && row.state !== 'errored') continue;
    outcome.scored += 1;
    outcome.sum += row.reward ?? 0;
    outcome.mean = outcome.sum / outcome.scored;
  }
  return byTask;
}

export function comparePage(ctx: LinkContext, a: CompareSide, b: CompareSide): string {
  const left = outcomesByTask(a);
  const right = outcomesByTask(b);
  const tasks = [...new Set([...left.keys(), ...right.keys()])];
  const rows = tasks.map((task) => {
    const l = left.get(task)?.mean ?? null;
    const r = right.get(task)?.mean ?? null;
    return { task, l, r, diff: l !== null && r !== null ? r - l : null };
  });
  // The tasks where they differ most first; then tasks only one side ran; then ties, by name.
  rows.sort(
    (x, y) =>
      Math.abs(y.diff ?? 0) - Math.abs(x.diff ?? 0) ||
      Number(x.diff !== null) - Number(y.diff !== null) ||
      x.task.localeCompare(y.task)
  );
  const paired = rows.filter((row) => row.diff !== null);
  const estimate = meanEstimate(paired.map((row) => ({ n: 1, sum: row.diff!, passes: 0 })));
  const better = paired.filter((row) => row.diff! > 0).length;
  const worse = paired.filter((row) => row.diff! < 0).length;
  const label = (side: CompareSide) => `${side.agent} (${side.job})`;
  return document(
    `${a.agent} vs ${b.agent}`,
    ctx,
    html`<section>
      <nav class="crumbs">
        <a href=${ctx.href([])}>jobs</a> / <a href=${ctx.href(['jobs', a.job])}>${a.job}</a>${
          a.job !== b.job ? html` · <a href=${ctx.href(['jobs', b.job])}>${b.job}</a>` : null
        }${' / compare'}
      </nav>
      <h1>A: ${label(a)} vs B: ${label(b)}</h1>
      <p class="summary" id="compare-summary">
        ${paired.length} tasks both ran · B better on ${better}, A better on ${worse}, equal on${' '}
        ${paired.length - better - worse} · mean difference B − A ${fmt(estimate.mean)}
        ${
          estimate.ci95
            ? html`${`, 95% CI [${fmt(estimate.ci95[0])}, ${fmt(estimate.ci95[1])}] `}${
                estimate.ci95[0] > 0 || estimate.ci95[1] < 0
                  ? html`<strong>(a difference beyond noise)</strong>`
                  : html`<span class="muted">(within noise: the interval contains 0)</span>`
              }`
            : null
        }
      </p>
      <p class="note">
        Per task: the mean primary reward over its scored attempts. The interval is the paired t-interval over tasks.
      </p>
      <table class="sortable" id="compare-table">
        <thead>
          <tr>
            <th>task</th>
            <th data-sort-method="number">A: ${a.agent}</th>
            <th data-sort-method="number">B: ${b.agent}</th>
            <th data-sort-method="number">B − A</th>
          </tr>
        </thead>
        <tbody>
          ${rows.map(
            (row) =>
              html`<tr class=${row.diff ? 'differs' : ''}>
                <td>${row.task}</td>
                <td class="num" style=${`background:${rewardColour(row.l)}`}>
                  <a href=${ctx.href(['jobs', a.job], { task: row.task, agent: a.agent }) + '#trials'}>${fmt(row.l)}</a>
                </td>
                <td class="num" style=${`background:${rewardColour(row.r)}`}>
                  <a href=${ctx.href(['jobs', b.job], { task: row.task, agent: b.agent }) + '#trials'}>${fmt(row.r)}</a>
                </td>
                <td class="num">${row.diff === null ? '–' : `${row.diff > 0 ? '+' : ''}${fmt(row.diff)}`}</td>
              </tr>`
          )}
        </tbody>
      </table>
    </section>`
  );
}

// ---------------------------------------------------------------------------------------------------------------
// A trial

export interface ShownFile {
  path: string;
  size: number;
  /** The first bytes, when the file is text. */
  head: string | undefined;
  truncated: boolean;
}

export interface TrialPageData {
  jobName: string;
  row: TrialRow;
  instruction: string | undefined;
  files: ShownFile[];
  trajectory: Trajectory | undefined;
}

export function trialPage(ctx: LinkContext, data: TrialPageData): string {
  const { row, jobName } = data;
  const result = row.result;
  const uiLink =
    ctx.temporalUiUrl && result
      ? `${ctx.temporalUiUrl}/namespaces/${encodeURIComponent(ctx.temporalNamespace)}/workflows/${encodeURIComponent(result.workflow_id)}`
      : null;
  return document(
    row.trialName,
    ctx,
    html`<section>
      <nav class="crumbs">
        <a href=${ctx.href([])}>jobs</a> / <a href=${ctx.href(['jobs', jobName])}>${jobName}</a> / ${row.trialName}
      </nav>
      <h1>${row.trialName} <span class=${`status ${row.state}`}>${row.state}</span></h1>
      <table class="facts" id="facts">
        <tbody>
          <tr>
            <th>task</th>
            <td>${row.taskName} <span class="muted">(${row.datasetName})</span></td>
          </tr>
          <tr>
            <th>agent</th>
            <td>
              ${row.agentName}${' '}
              ${
                row.agentInfo
                  ? html`<span class="muted"
                      >${[row.agentInfo.name, row.agentInfo.version, row.agentInfo.model].filter(Boolean).join(' · ')}</span
                    >`
                  : null
              }
            </td>
          </tr>
          <tr>
            <th>attempt</th>
            <td>${row.attempt}</td>
          </tr>
          <tr>
            <th>rewards</th>
            <td id="rewards">
              ${
                result?.rewards
                  ? Object.entries(result.rewards).map(
                      ([key, value]) =>
                        html`<span class="chip reward" style=${`background:${rewardColour(value)}`}
                          >${key} ${fmt(value)}</span
                        > `
                    )
                  : 'none'
              }
            </td>
          </tr>
          <tr>
            <th>error</th>
            <td id="error">
              ${
                result?.error
                  ? html`<span class=${`chip ${errorLevel(result.error.type)}`}>${result.error.type}</span>${' in '}
                      <b>${result.error.step}</b>
                      <pre class="message">${result.error.message}</pre>`
                  : 'none'
              }
            </td>
          </tr>
          <tr>
            <th>agent exit code</th>
            <td>${result?.agent_exit_code ?? '–'}</td>
          </tr>
          <tr>
            <th>host · image</th>
            <td>${result?.host ?? '–'} · ${result?.image ?? '–'}</td>
          </tr>
          <tr>
            <th>restarts</th>
            <td>${result?.restarts ?? 0}</td>
          </tr>
          ${
            row.usage
              ? html`<tr>
                  <th>usage</th>
                  <td id="usage">
                    ${row.usage.n_llm_calls ?? '–'} LLM calls · ${row.usage.input_tokens ?? '–'} input tokens
                    (${row.usage.cached_tokens ?? 0} cached) · ${row.usage.output_tokens ?? '–'} output tokens ·
                    $${fmt(row.usage.cost_usd, 4)}
                  </td>
                </tr>`
              : null
          }
          <tr>
            <th>workflow</th>
            <td>
              ${result?.workflow_id ?? '–'}
              ${uiLink ? html` · <a href=${uiLink} id="temporal-link">open in the Temporal UI</a>` : null}
            </td>
          </tr>
        </tbody>
      </table>
      ${result ? timeline(result) : html`<p>This trial has not finished.</p>`}
      ${
        data.instruction !== undefined
          ? html`<details open>
              <summary><h2>Instruction</h2></summary>
              <pre class="file">${data.instruction}</pre>
            </details>`
          : null
      }
      ${data.trajectory ? html`<${TrajectoryView} trajectory=${data.trajectory} />` : null}
      <h2>Logs and files</h2>
      ${data.files.map(
        (file) =>
          html`<details class="file" open=${file.path.endsWith('.txt') || file.path === 'trial.log'}>
            <summary>
              <code>${file.path}</code> <span class="muted">${bytes(file.size)}</span>${' · '}
              <a href=${ctx.file(['jobs', jobName, 'trials', row.trialName, 'files', ...file.path.split('/')])} download
                >download</a
              >
            </summary>
            ${
              file.head === undefined
                ? html`<p class="muted">binary file</p>`
                : html`<pre class="file">${file.head}</pre>`
            }
            ${
              file.truncated
                ? html`<p class="muted">showing the first ${bytes(file.head?.length ?? 0)} of ${bytes(file.size)}</p>`
                : null
            }
          </details>`
      )}
    </section>`
  );
}

function timeline(result: NonNullable<TrialRow['result']>): VNode {
  const start = Date.parse(result.started_at);
  const end = Math.max(Date.parse(result.finished_at), start + 1);
  const span = end - start;
  const row = (step: string, timing: StepTiming | null | undefined, failed: boolean) => {
    if (!timing) return [];
    const from = Date.parse(timing.started_at);
    const to = timing.finished_at ? Date.parse(timing.finished_at) : end;
    return [{ step, from: from - start, duration: Math.max(0, to - from), failed }];
  };
  const taskSteps = result.step_results ?? [];
  // A multi-step task's execute and verify: one row per step of the task.
  const steps = STEPS.flatMap((step) =>
    (step === 'execute' || step === 'verify') && taskSteps.length
      ? taskSteps.flatMap((taskStep) =>
          row(`${step} · ${taskStep.name}`, taskStep[step], taskStep.error?.step === step)
        )
      : row(step, result.steps[step], result.error?.step === step)
  );
  return html`<div id="timeline">
    <h2>Lifecycle <span class="muted">${fmt(span / 1000, 1)} s</span></h2>
    <table class="timeline">
      <tbody>
        ${steps.map(
          (s) =>
            html`<tr>
              <th>${s.step}</th>
              <td class="num">${fmt(s.from / 1000, 1)} s</td>
              <td class="num">${fmt(s.duration / 1000, 2)} s</td>
              <td class="track">
                <span
                  class=${`bar ${s.failed ? 'failed' : ''}`}
                  style=${`left:${(s.from / span) * 100}%;width:${Math.max(0.5, (s.duration / span) * 100)}%`}
                ></span>
              </td>
            </tr>`
        )}
      </tbody>
    </table>
    ${taskSteps.length ? taskStepsTable(taskSteps) : null}
  </div>`;
}

/** A multi-step task's steps: rewards, and what ended a step early. */
function taskStepsTable(taskSteps: TaskStepResult[]): VNode {
  return html`<table id="task-steps">
    <thead>
      <tr>
        <th>step</th>
        <th>rewards</th>
        <th>error</th>
      </tr>
    </thead>
    <tbody>
      ${taskSteps.map(
        (taskStep) =>
          html`<tr>
            <th>${taskStep.name}</th>
            <td>${taskStep.rewards ? JSON.stringify(taskStep.rewards) : 'none'}</td>
            <td>
              ${taskStep.error ? `${taskStep.error.type}: ${taskStep.error.message}` : ''}${
                taskStep.below_min_reward ? `stopped: ${taskStep.below_min_reward}` : ''
              }
            </td>
          </tr>`
      )}
    </tbody>
  </table>`;
}

export function notFoundPage(ctx: LinkContext, message: string): string {
  return document(
    'Not found',
    ctx,
    html`<section>
      <h1>Not found</h1>
      <p>${message}</p>
    </section>`
  );
}
