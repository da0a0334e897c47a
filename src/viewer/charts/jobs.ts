/** The jobs page's picture: each agent's mean reward per job, by the job's start, so a series of runs shows progress. */
import { primaryKey } from '../../results/job-stats';
import type { JobSummary } from '../data';
import type { VNode } from '../html';
import { fmt, html } from '../html';
import { chart, colour, emptyChart, linear, pathOf, plotArea, ticksOf } from './svg';

/** The most recent jobs drawn; older ones stay in the table. */
const MAX_JOBS = 200;

interface Point {
  job: string;
  time: number;
  mean: number;
  /** The interval when the agent ran one dataset in the job (several datasets have no single interval). */
  ci95: [number, number] | null;
}

/** Per agent: its primary reward's mean over the job's datasets (weighted by trials), one point per job. */
function seriesOf(jobs: JobSummary[]): Map<string, Point[]> {
  const series = new Map<string, Point[]>();
  for (const job of jobs) {
    const result = job.result;
    if (!result) continue;
    const byAgent = new Map<string, { n: number; sum: number; ci95: [number, number] | null; evals: number }>();
    for (const evaluation of Object.values(result.evals)) {
      const metric = evaluation.metrics[primaryKey(Object.keys(evaluation.metrics))];
      if (!metric || metric.n === 0) continue;
      const entry = byAgent.get(evaluation.agent) ?? { n: 0, sum: 0, ci95: metric.ci95, evals: 0 };
      byAgent.set(evaluation.agent, entry);
      entry.n += metric.n;
      entry.sum += metric.mean * metric.n;
      entry.evals += 1;
    }
    for (const [agent, entry] of byAgent) {
      const points = series.get(agent) ?? [];
      series.set(agent, points);
      const time = Date.parse(result.started_at);
      if (Number.isFinite(time))
        points.push({ job: job.name, time, mean: entry.sum / entry.n, ci95: entry.evals === 1 ? entry.ci95 : null });
    }
  }
  for (const points of series.values()) points.sort((a, b) => a.time - b.time);
  return series;
}

export function historyChart(jobs: JobSummary[]): VNode {
  const title = 'Mean reward per job, by agent';
  const recent = [...jobs]
    .filter((job) => job.result)
    .sort((a, b) => Date.parse(b.result!.started_at) - Date.parse(a.result!.started_at))
    .slice(0, MAX_JOBS);
  const series = seriesOf(recent);
  if (series.size === 0) return emptyChart('chart-history', title, 'no job has a scored trial yet');
  const all = [...series.values()].flat();
  const first = Math.min(...all.map((p) => p.time));
  const last = Math.max(...all.map((p) => p.time));
  const top = Math.max(1, ...all.map((p) => p.ci95?.[1] ?? p.mean));
  const low = Math.min(0, ...all.map((p) => p.ci95?.[0] ?? p.mean));
  const area = plotArea();
  // One job: a day either side, so the point sits in the middle.
  const x = linear(first === last ? [first - 86_400_000, last + 86_400_000] : [first, last], [
    area.x[0] + 8,
    area.x[1] - 8,
  ]);
  const y = linear([low, top], area.y);
  const agents = [...series.keys()].sort();
  const marks = agents.flatMap((agent, i) => {
    const points = series.get(agent)!;
    // Agents of one job sit a few pixels apart, so their intervals do not hide each other.
    const at = (p: Point) => x(p.time) + (i - (agents.length - 1) / 2) * 5;
    return [
      points.length > 1
        ? html`<path
            class="line"
            data-series=${agent}
            d=${pathOf(points.map((p) => [at(p), y(p.mean)]))}
            stroke=${colour(i)}
          />`
        : null,
      ...points.map(
        (p) =>
          html`<g class="point" data-agent=${agent} data-job=${p.job}>
            ${p.ci95 ? html`<line class="whisker" x1=${at(p)} x2=${at(p)} y1=${y(p.ci95[0])} y2=${y(p.ci95[1])} stroke=${colour(i)} />` : null}
            <circle cx=${at(p).toFixed(1)} cy=${y(p.mean).toFixed(1)} r="4" fill=${colour(i)}
              ><title>
                ${`${p.job} · ${agent}: mean ${fmt(p.mean)}${p.ci95 ? ` [${fmt(p.ci95[0])}, ${fmt(p.ci95[1])}]` : ''}`}
              </title></circle
            >
          </g>`
      ),
    ];
  });
  const day = (ms: number) => new Date(ms).toISOString().slice(0, 10);
  const sameDay = day(first) === day(last);
  return chart({
    id: 'chart-history',
    title,
    desc: `Mean primary reward of ${agents.join(', ')} in the ${recent.length} most recent jobs, by start time, with 95% intervals.`,
    xLabel: 'job start (UTC)',
    yLabel: 'mean reward',
    xTicks: [first, last]
      .filter((t, i) => i === 0 || t !== first)
      .map((t) => ({ at: x(t), label: sameDay ? new Date(t).toISOString().slice(11, 19) : day(t) })),
    yTicks: ticksOf(y),
    marks,
    legend: agents.map((agent, i) => ({ label: agent, colour: colour(i) })),
  });
}
