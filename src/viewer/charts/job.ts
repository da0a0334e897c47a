/**
 * The job page's pictures: how rewards are spread per agent, pass@k against k, trials finished and errors over time,
 * tokens and cost per agent. Rewards are binned and time is sampled, so a job of any size draws a bounded picture.
 */
import { primaryKey } from '../../results/job-stats';
import type { EvalView, TrialRow, UsageTotals } from '../data';
import type { VNode } from '../html';
import { fmt, html } from '../html';
import { chart, colour, emptyChart, linear, pathOf, plotArea, short, ticksOf } from './svg';

const REWARD_BINS = 10;
/** Points of the progress lines: the time axis is sampled, never one point per trial. */
const PROGRESS_SAMPLES = 120;

export function jobCharts(rows: TrialRow[], evals: EvalView[], usage: Map<string, UsageTotals>, now: number): VNode {
  const agents = [...new Set(rows.map((row) => row.agentName))].sort();
  return html`<div class="charts" id="job-charts">
    ${rewardChart(rows, agents)} ${passAtKChart(evals, agents)} ${progressChart(rows, now)} ${usageCharts(usage)}
  </div>`;
}

function scoredReward(row: TrialRow): number | null {
  return row.state === 'completed' || row.state === 'errored' ? (row.reward ?? 0) : null;
}

/** Share of each agent's scored trials per reward bin (0 and 1 apart when those are the only values). */
export function rewardChart(rows: TrialRow[], agents: string[]): VNode {
  const title = 'Reward distribution per agent';
  const values = rows.map(scoredReward);
  const scored = values.filter((v): v is number => v !== null);
  if (scored.length === 0) return emptyChart('chart-rewards', title, 'no scored trial yet');
  const min = scored.reduce((a, b) => Math.min(a, b));
  const max = scored.reduce((a, b) => Math.max(a, b));
  const binary = scored.every((v) => v === 0 || v === 1);
  const bins = binary ? 2 : min === max ? 1 : REWARD_BINS;
  const width = (max - min) / bins;
  const binOf = (v: number) => (binary ? v : bins === 1 ? 0 : Math.min(bins - 1, Math.floor((v - min) / width)));
  const labelOf = (bin: number) =>
    binary ? String(bin) : bins === 1 ? fmt(min) : `${fmt(min + bin * width, 2)}–${fmt(min + (bin + 1) * width, 2)}`;
  const counts = agents.map(() => new Array<number>(bins).fill(0));
  rows.forEach((row, i) => {
    const v = values[i];
    if (v !== null && v !== undefined) counts[agents.indexOf(row.agentName)]![binOf(v)]! += 1;
  });
  const totals = counts.map((c) => c.reduce((a, b) => a + b, 0));
  const area = plotArea();
  const y = linear([0, 1], area.y);
  const band = (area.x[1] - area.x[0]) / bins;
  const barWidth = (band * 0.8) / Math.max(1, agents.length);
  const marks = counts.flatMap((perBin, a) =>
    perBin.map((count, bin) => {
      const share = totals[a] ? count / totals[a] : 0;
      const x = area.x[0] + bin * band + band * 0.1 + a * barWidth;
      return html`<rect
        class="bar"
        data-agent=${agents[a]}
        data-bin=${labelOf(bin)}
        data-count=${count}
        x=${x.toFixed(1)}
        y=${y(share).toFixed(1)}
        width=${barWidth.toFixed(1)}
        height=${(y(0) - y(share)).toFixed(1)}
        fill=${colour(a)}
        ><title>${`${agents[a]}: ${count} of ${totals[a]} scored trials with reward ${labelOf(bin)}`}</title></rect
      >`;
    })
  );
  return chart({
    id: 'chart-rewards',
    title,
    desc: `Share of each agent's scored trials per reward${binary ? ' (0 or 1)' : ` bin from ${fmt(min)} to ${fmt(max)}`}.`,
    xLabel: binary ? 'reward' : 'reward (binned)',
    yLabel: 'share of trials',
    // Bins of a range are labelled at their edges (a label per bin would overlap); 0, 1 or one value under its bar.
    xTicks:
      bins === REWARD_BINS
        ? Array.from({ length: bins + 1 }, (_, edge) => ({
            at: area.x[0] + edge * band,
            label: fmt(min + edge * width, 2),
          }))
        : Array.from({ length: bins }, (_, bin) => ({ at: area.x[0] + (bin + 0.5) * band, label: labelOf(bin) })),
    yTicks: ticksOf(y, (v) => `${Math.round(v * 100)}%`),
    marks,
    legend: agents.map((agent, a) => ({ label: agent, colour: colour(a) })),
  });
}

/** pass@k of each agent × dataset's primary key against k. */
/** `agents`: every agent of the job, sorted: an agent keeps its colour across the job's charts. */
export function passAtKChart(evals: EvalView[], agents: string[]): VNode {
  const title = 'pass@k against k';
  const several = new Set(evals.map((e) => e.dataset)).size > 1;
  const series = evals.flatMap((e) => {
    const passAtK = e.metrics[primaryKey(Object.keys(e.metrics))]?.pass_at_k;
    if (!passAtK) return [];
    const points = Object.entries(passAtK).map(([k, v]) => [Number(k), v] as [number, number]);
    return [
      { label: several ? `${e.agent} · ${e.dataset}` : e.agent, points, colour: colour(agents.indexOf(e.agent)) },
    ];
  });
  if (series.length === 0) return emptyChart('chart-pass-at-k', title, 'needs several attempts per task');
  const maxK = Math.max(...series.flatMap((s) => s.points.map(([k]) => k)));
  const area = plotArea();
  const x = linear([1, maxK], area.x);
  const y = linear([0, 1], area.y);
  const marks = series.flatMap((s) => [
    html`<path
      class="line"
      data-series=${s.label}
      d=${pathOf(s.points.map(([k, v]) => [x(k), y(v)]))}
      stroke=${s.colour}
    />`,
    // Every k gets a dot while they stay apart; past 50 the line alone.
    ...(maxK <= 50
      ? s.points.map(
          ([k, v]) =>
            html`<circle class="point" cx=${x(k).toFixed(1)} cy=${y(v).toFixed(1)} r="3.5" fill=${s.colour}
              ><title>${`${s.label}: pass@${k} = ${fmt(v)}`}</title></circle
            >`
        )
      : []),
  ]);
  return chart({
    id: 'chart-pass-at-k',
    title,
    desc: `pass@k for k from 1 to ${maxK}, per agent: the chance that at least one of k attempts passes.`,
    xLabel: 'k (attempts)',
    yLabel: 'pass@k',
    xTicks: ticksOf(x, (v) => (Number.isInteger(v) ? String(v) : '')).filter((t) => t.label),
    yTicks: ticksOf(y),
    marks,
    legend: series.map((s) => ({ label: s.label, colour: s.colour })),
  });
}

/** Trials finished and trials errored, cumulative, from the first start to the last finish (or now, running). */
export function progressChart(rows: TrialRow[], now: number): VNode {
  const title = 'Trials finished and errors over time';
  const done = rows.filter((row) => row.result);
  if (done.length === 0) return emptyChart('chart-progress', title, 'no trial has finished yet');
  const finishes = done.map((row) => Date.parse(row.result!.finished_at)).sort((a, b) => a - b);
  const errors = done
    .filter((row) => row.errorType !== null)
    .map((row) => Date.parse(row.result!.finished_at))
    .sort((a, b) => a - b);
  const start = done.reduce((t, row) => Math.min(t, Date.parse(row.result!.started_at)), finishes[0]!);
  const end =
    done.length < rows.length ? Math.max(now, finishes[finishes.length - 1]!) : finishes[finishes.length - 1]!;
  const area = plotArea();
  const x = linear([0, (end - start) / 1000], area.x);
  const y = linear([0, rows.length], area.y);
  const line = (times: number[]) => {
    const points: [number, number][] = [];
    for (let i = 0; i <= PROGRESS_SAMPLES; i++) {
      const t = start + ((end - start) * i) / PROGRESS_SAMPLES;
      points.push([x((t - start) / 1000), y(countAtOrBefore(times, t))]);
    }
    return pathOf(points);
  };
  return chart({
    id: 'chart-progress',
    title,
    desc: `${finishes.length} of ${rows.length} trials finished, ${errors.length} with an error, over ${fmt((end - start) / 1000, 0)} seconds.`,
    xLabel: 'seconds since the first trial started',
    yLabel: 'trials',
    xTicks: ticksOf(x),
    yTicks: ticksOf(y),
    marks: [
      html`<path
        class="line"
        data-series="finished"
        data-final=${finishes.length}
        d=${line(finishes)}
        stroke=${colour(0)}
      />`,
      html`<path
        class="line"
        data-series="errors"
        data-final=${errors.length}
        d=${line(errors)}
        stroke=${colour(1)}
      />`,
    ],
    legend: [
      { label: `finished (${finishes.length})`, colour: colour(0) },
      { label: `errors (${errors.length})`, colour: colour(1) },
    ],
  });
}

/** How many of the sorted `times` are ≤ t. */
function countAtOrBefore(times: number[], t: number): number {
  let low = 0;
  let high = times.length;
  while (low < high) {
    const mid = (low + high) >> 1;
    if (times[mid]! <= t) low = mid + 1;
    else high = mid;
  }
  return low;
}

/** Tokens (input, cached, output) and cost per agent, as the gateway recorded them. */
export function usageCharts(usage: Map<string, UsageTotals>): VNode | null {
  if (usage.size === 0) return null;
  const agents = [...usage.keys()];
  const area = plotArea();
  const band = (area.x[1] - area.x[0]) / agents.length;
  const kinds = [
    ['input_tokens', 'input', '#2563eb'],
    ['cached_tokens', 'cached', '#93c5fd'],
    ['output_tokens', 'output', '#f59e0b'],
  ] as const;
  const maxTokens = Math.max(1, ...[...usage.values()].flatMap((u) => kinds.map(([field]) => u[field])));
  const tokenY = linear([0, maxTokens], area.y);
  const barWidth = (band * 0.8) / kinds.length;
  const tokens = agents.flatMap((agent, a) =>
    kinds.map(([field, label, fill], k) => {
      const value = usage.get(agent)![field];
      return html`<rect
        class="bar"
        data-agent=${agent}
        data-kind=${label}
        data-value=${value}
        x=${(area.x[0] + a * band + band * 0.1 + k * barWidth).toFixed(1)}
        y=${tokenY(value).toFixed(1)}
        width=${barWidth.toFixed(1)}
        height=${(tokenY(0) - tokenY(value)).toFixed(1)}
        fill=${fill}
        ><title>${`${agent}: ${value} ${label} tokens`}</title></rect
      >`;
    })
  );
  const maxCost = Math.max(0, ...[...usage.values()].map((u) => u.cost_usd));
  const costY = linear([0, maxCost], area.y);
  const cost = agents.map((agent, a) => {
    const value = usage.get(agent)!.cost_usd;
    return html`<rect
      class="bar"
      data-agent=${agent}
      data-value=${value}
      x=${(area.x[0] + a * band + band * 0.25).toFixed(1)}
      y=${costY(value).toFixed(1)}
      width=${(band * 0.5).toFixed(1)}
      height=${(costY(0) - costY(value)).toFixed(1)}
      fill=${colour(a)}
      ><title>${`${agent}: $${fmt(value, 4)}`}</title></rect
    >`;
  });
  const agentTicks = agents.map((agent, a) => ({ at: area.x[0] + (a + 0.5) * band, label: agent }));
  const costChart =
    maxCost === 0
      ? emptyChart('chart-cost', 'Cost per agent', 'no cost recorded: no price is known for the models used')
      : chart({
          id: 'chart-cost',
          title: 'Cost per agent',
          desc: `Model cost in USD: ${agents.map((agent) => `${agent} $${fmt(usage.get(agent)!.cost_usd, 4)}`).join('; ')}.`,
          xLabel: 'agent',
          yLabel: 'cost (USD)',
          xTicks: agentTicks,
          yTicks: ticksOf(costY, (v) => `$${short(v)}`),
          marks: cost,
        });
  return html`<div class="chart-pair">
    ${chart({
      id: 'chart-tokens',
      title: 'Tokens per agent',
      desc: `Input, cached and output tokens over each agent's trials: ${agents.map((agent) => `${agent} ${usage.get(agent)!.input_tokens} in, ${usage.get(agent)!.output_tokens} out`).join('; ')}.`,
      xLabel: 'agent',
      yLabel: 'tokens',
      xTicks: agentTicks,
      yTicks: ticksOf(tokenY),
      marks: tokens,
      legend: kinds.map(([, label, fill]) => ({ label, colour: fill })),
    })}
    ${costChart}
  </div>`;
}
