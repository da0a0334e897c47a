/** The job page's long sections: the task × agent matrix, links to comparisons, and the filtered, paged trials. */
import type { TrialFilter, TrialRow } from '../data';
import { cellKey, errorLevel, matrixOf } from '../data';
import type { LinkContext, VNode } from '../html';
import { fmt, html, rewardColour } from '../html';
import { pager } from './shared';

export const TRIALS_PER_PAGE = 100;
export const MATRIX_TASKS_PER_PAGE = 200;

export function matrixSection(ctx: LinkContext, jobName: string, rows: TrialRow[], page: number): VNode {
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

export function compareSection(
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

/** The trials of a job: `rows` all of them, `filtered` those the filter keeps (a page of which is shown live). */
export interface TrialsView {
  jobName: string;
  rows: TrialRow[];
  filter: TrialFilter;
  filtered: TrialRow[];
  page: number;
}

export function trialsSection(ctx: LinkContext, data: TrialsView, agents: string[], errorTypes: string[]): VNode {
  const { filter, filtered, jobName } = data;
  const pages = Math.max(1, Math.ceil(filtered.length / TRIALS_PER_PAGE));
  const current = ctx.live ? Math.min(Math.max(1, data.page), pages) : 1;
  const shown = ctx.live ? filtered.slice((current - 1) * TRIALS_PER_PAGE, current * TRIALS_PER_PAGE) : filtered;
  const query = filterQuery(filter);
  return html`<div>
    ${ctx.live ? filtersForm(ctx, data, agents, errorTypes) : null}
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
              <td><a href=${ctx.href(['jobs', jobName, 'trials', row.trialName])}>${row.trialName}</a></td>
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
    ${pages > 1 && ctx.live ? pager(ctx, 'trial-pager', ['jobs', jobName], query, 'page', current, pages, '#trials') : null}
  </div>`;
}

/** The live viewer's filters: search, task, agent, error, reward range. */
function filtersForm(ctx: LinkContext, data: TrialsView, agents: string[], errorTypes: string[]): VNode {
  const { filter, jobName } = data;
  const tasks = [...new Set(data.rows.map((row) => row.taskName))].sort();
  return html`<form method="get" action=${ctx.href(['jobs', jobName]) + '#trials'} class="filters" id="filters">
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
    <a href=${ctx.href(['jobs', jobName]) + '#trials'}>clear</a>
  </form>`;
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
