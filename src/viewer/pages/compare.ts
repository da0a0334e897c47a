/** Two agents (of one job or two) task by task: where they differ, and whether the difference is beyond noise. */
import { MIN_TASKS_BOOTSTRAP, pairedEstimate } from '../../results/statistics';
import { differenceChart } from '../charts/compare';
import type { TrialRow } from '../data';
import type { LinkContext } from '../html';
import { document, fmt, html, rewardColour } from '../html';

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
  const rows = taskRows(outcomesByTask(a), outcomesByTask(b));
  const paired = rows.filter((row) => row.diff !== null);
  const estimate = pairedEstimate(paired.map((row) => row.diff!));
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
            : paired.length
              ? html` <span class="muted">(no interval: fewer than ${MIN_TASKS_BOOTSTRAP} tasks both ran)</span>`
              : null
        }
      </p>
      ${differenceChart(
        paired.map((row) => ({ task: row.task, diff: row.diff! })),
        estimate,
        { a: 'A', b: 'B' }
      )}
      <p class="note">
        Per task: the mean primary reward over its scored attempts. The interval is a bootstrap over tasks of the mean
        difference (docs/results.md).
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

/** Each task's mean reward on both sides: where they differ most first, then tasks one side ran, then ties by name. */
function taskRows(left: ReturnType<typeof outcomesByTask>, right: ReturnType<typeof outcomesByTask>) {
  const tasks = [...new Set([...left.keys(), ...right.keys()])];
  const rows = tasks.map((task) => {
    const l = left.get(task)?.mean ?? null;
    const r = right.get(task)?.mean ?? null;
    return { task, l, r, diff: l !== null && r !== null ? r - l : null };
  });
  rows.sort(
    (x, y) =>
      Math.abs(y.diff ?? 0) - Math.abs(x.diff ?? 0) ||
      Number(x.diff !== null) - Number(y.diff !== null) ||
      x.task.localeCompare(y.task)
  );
  return rows;
}
