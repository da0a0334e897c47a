/** The comparison's picture: B − A per task, sorted, with the mean difference and its paired interval as a band. */
import type { MeanEstimate } from '../../results/statistics';
import type { VNode } from '../html';
import { fmt, html } from '../html';
import { chart, colour, emptyChart, linear, plotArea, ticksOf } from './svg';

/** Past this many tasks, neighbouring (sorted) tasks share a column: their mean difference. */
const MAX_COLUMNS = 300;

export function differenceChart(
  differences: { task: string; diff: number }[],
  estimate: MeanEstimate,
  names: { a: string; b: string }
): VNode {
  const title = `Per-task difference ${names.b} − ${names.a}`;
  if (differences.length === 0) return emptyChart('chart-differences', title, 'no task that both ran');
  const sorted = [...differences].sort((x, y) => y.diff - x.diff || x.task.localeCompare(y.task));
  const columns = Math.min(MAX_COLUMNS, sorted.length);
  const groups = Array.from({ length: columns }, (_, c) =>
    sorted.slice(Math.floor((c * sorted.length) / columns), Math.floor(((c + 1) * sorted.length) / columns))
  );
  const extent = Math.max(1e-9, ...sorted.map((d) => Math.abs(d.diff)), ...(estimate.ci95 ?? []).map(Math.abs));
  const area = plotArea();
  const y = linear([-extent, extent], area.y);
  const band = (area.x[1] - area.x[0]) / columns;
  const marks: (VNode | null)[] = [
    estimate.ci95
      ? html`<rect
          class="ci"
          x=${area.x[0]}
          width=${area.x[1] - area.x[0]}
          y=${y(estimate.ci95[1]).toFixed(1)}
          height=${Math.max(1, y(estimate.ci95[0]) - y(estimate.ci95[1])).toFixed(1)}
          ><title>
            ${`95% interval of the mean difference [${fmt(estimate.ci95[0])}, ${fmt(estimate.ci95[1])}]`}
          </title></rect
        >`
      : null,
    html`<line class="zero" x1=${area.x[0]} x2=${area.x[1]} y1=${y(0)} y2=${y(0)} />`,
    ...groups.map((group, c) => {
      const diff = group.reduce((t, d) => t + d.diff, 0) / group.length;
      const label =
        group.length === 1
          ? group[0]!.task
          : `${group.length} tasks (${group[0]!.task} … ${group[group.length - 1]!.task})`;
      return html`<rect
        class="bar"
        data-diff=${fmt(diff)}
        x=${(area.x[0] + c * band + band * 0.1).toFixed(1)}
        width=${Math.max(0.5, band * 0.8).toFixed(1)}
        y=${Math.min(y(diff), y(0)).toFixed(1)}
        height=${Math.abs(y(diff) - y(0)).toFixed(1)}
        fill=${diff >= 0 ? colour(0) : colour(1)}
        ><title>${`${label}: ${diff > 0 ? '+' : ''}${fmt(diff)}`}</title></rect
      >`;
    }),
    html`<line class="mean" x1=${area.x[0]} x2=${area.x[1]} y1=${y(estimate.mean)} y2=${y(estimate.mean)}
      ><title>${`mean difference ${fmt(estimate.mean)}`}</title></line
    >`,
  ];
  return chart({
    id: 'chart-differences',
    title,
    desc:
      `${differences.length} tasks both ran, sorted from ${names.b}'s largest lead to ${names.a}'s; mean difference ` +
      `${fmt(estimate.mean)}${estimate.ci95 ? `, 95% interval [${fmt(estimate.ci95[0])}, ${fmt(estimate.ci95[1])}] (shaded)` : ''}.`,
    xLabel: columns < sorted.length ? `tasks, sorted (${sorted.length} in ${columns} columns)` : 'tasks, sorted',
    yLabel: `${names.b} − ${names.a}`,
    xTicks: [],
    yTicks: ticksOf(y, (v) => (v > 0 ? `+${fmt(v, 2)}` : fmt(v, 2))),
    marks,
    legend: [
      { label: `${names.b} better`, colour: colour(0) },
      { label: `${names.a} better`, colour: colour(1) },
      { label: 'mean and 95% interval', colour: '#9ca3af' },
    ],
  });
}
