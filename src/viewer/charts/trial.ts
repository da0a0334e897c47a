/**
 * The trial page's picture: the lifecycle steps and the agent's model calls on one time axis (each call from its
 * start to its end, so its length is its latency), and below it, on the same axis, the tokens of each call.
 */
import type { TrialRow } from '../data';
import type { VNode } from '../html';
import { fmt, html } from '../html';
import type { LlmCall } from '../trajectory';
import type { Scale } from './svg';
import { chart, colour, linear, plotArea, ticksOf } from './svg';

/** Past this many calls, calls are counted per time bucket instead of drawn one by one. */
const MAX_CALL_MARKS = 400;
const BUCKETS = 200;
const WIDTH = 900;
const LEFT = 120;
const LANE = 18;

export interface StepSpan {
  step: string;
  /** ms since the trial started. */
  from: number;
  duration: number;
  failed: boolean;
}

interface CallSpan {
  from: number;
  to: number;
  input: number;
  output: number;
  label: string;
}

function callSpans(calls: LlmCall[], start: number): CallSpan[] {
  return calls.flatMap((call, i) => {
    const begin = Date.parse(call.started_at ?? call.timestamps?.started_at ?? '');
    if (!Number.isFinite(begin)) return [];
    const latency = call.latency_ms ?? call.latency ?? 0;
    const finished = Date.parse(call.finished_at ?? call.timestamps?.finished_at ?? '');
    const end = Number.isFinite(finished) ? finished : begin + latency;
    const input = call.usage?.input_tokens ?? 0;
    const output = call.usage?.output_tokens ?? 0;
    return [
      {
        from: begin - start,
        to: Math.max(end, begin) - start,
        input,
        output,
        label: `call ${i + 1}${call.model ? ` (${call.model})` : ''}: ${fmt(latency, 0)} ms, ${input} in, ${output} out`,
      },
    ];
  });
}

export function trialCharts(result: NonNullable<TrialRow['result']>, steps: StepSpan[], calls: LlmCall[]): VNode {
  const start = Date.parse(result.started_at);
  const spans = callSpans(calls, start);
  const end = Math.max(
    Date.parse(result.finished_at) - start,
    ...steps.map((s) => s.from + s.duration),
    ...spans.map((c) => c.to),
    1
  );
  const lanes = [...steps.map((s) => s.step), ...(spans.length ? ['model calls'] : [])];
  const height = lanes.length * LANE + 52;
  const area = plotArea(WIDTH, height, LEFT);
  const x = linear([Math.min(0, ...spans.map((c) => c.from)) / 1000, end / 1000], area.x);
  const laneY = (lane: number) => area.y[1] + lane * LANE;
  const bar = (cls: string, from: number, to: number, lane: number, fill: string, title: string) =>
    html`<rect
      class=${cls}
      x=${x(from / 1000).toFixed(1)}
      y=${(laneY(lane) + 3).toFixed(1)}
      width=${Math.max(1, x(to / 1000) - x(from / 1000)).toFixed(1)}
      height=${LANE - 6}
      fill=${fill}
      ><title>${title}</title></rect
    >`;
  const stepMarks = steps.map((s, lane) =>
    bar(
      `step${s.failed ? ' failed' : ''}`,
      s.from,
      s.from + s.duration,
      lane,
      s.failed ? colour(1) : colour(0),
      `${s.step}: ${fmt(s.from / 1000, 1)} s → ${fmt((s.from + s.duration) / 1000, 1)} s (${fmt(s.duration / 1000, 2)} s)`
    )
  );
  const callLane = steps.length;
  const buckets = spans.length > MAX_CALL_MARKS ? bucketed(spans, x.domain, BUCKETS) : null;
  const callMarks = buckets
    ? buckets.map((b) =>
        bar('call', b.from, b.to, callLane, colour(4), `${b.count} calls, ${b.input} in, ${b.output} out`)
      )
    : spans.map((c) => bar('call', c.from, c.to, callLane, colour(4), c.label));
  const timeline = chart({
    id: 'chart-timeline',
    title: 'Lifecycle and model calls',
    desc:
      `The trial's lifecycle steps over ${fmt(end / 1000, 1)} seconds` +
      (spans.length ? `, and its ${spans.length} model calls (a call's length is its latency)` : '') +
      '.',
    xLabel: 'seconds since the trial started',
    yLabel: '',
    xTicks: ticksOf(x),
    yTicks: lanes.map((lane, i) => ({ at: laneY(i) + LANE / 2, label: lane })),
    marks: [...stepMarks, ...callMarks],
    width: WIDTH,
    height,
    left: LEFT,
  });
  if (spans.length === 0) return html`<div class="charts">${timeline}</div>`;
  return html`<div class="charts stacked">${timeline} ${tokenChart(spans, buckets, x)}</div>`;
}

/** Input and output tokens of each model call (or time bucket of calls), on the lifecycle's time axis. */
function tokenChart(spans: CallSpan[], buckets: ReturnType<typeof bucketed> | null, x: Scale): VNode {
  const tokenArea = plotArea(WIDTH, 200, LEFT);
  const points = buckets ?? spans;
  const maxTokens = Math.max(1, ...points.map((p) => p.input + p.output));
  const y = linear([0, maxTokens], tokenArea.y);
  const tokenMarks = points.flatMap((p) => {
    const left = x(p.from / 1000);
    // A call of a few milliseconds still gets a bar one can see and hover.
    const width = Math.max(6, x(p.to / 1000) - left);
    return [
      html`<rect
        class="tokens input"
        x=${left.toFixed(1)}
        width=${width.toFixed(1)}
        y=${y(p.input).toFixed(1)}
        height=${(y(0) - y(p.input)).toFixed(1)}
        fill=${colour(0)}
        ><title>${`${p.input} input tokens`}</title></rect
      >`,
      html`<rect
        class="tokens output"
        x=${left.toFixed(1)}
        width=${width.toFixed(1)}
        y=${y(p.input + p.output).toFixed(1)}
        height=${(y(p.input) - y(p.input + p.output)).toFixed(1)}
        fill=${colour(3)}
        ><title>${`${p.output} output tokens`}</title></rect
      >`,
    ];
  });
  return chart({
    id: 'chart-call-tokens',
    title: 'Tokens per model call',
    desc: `Input and output tokens of each of the ${spans.length} model calls${buckets ? `, summed per ${buckets.length} time buckets` : ''}, on the same time axis.`,
    xLabel: 'seconds since the trial started',
    yLabel: buckets ? 'tokens per bucket' : 'tokens per call',
    xTicks: ticksOf(x),
    yTicks: ticksOf(y),
    marks: tokenMarks,
    legend: [
      { label: 'input', colour: colour(0) },
      { label: 'output', colour: colour(3) },
    ],
    width: WIDTH,
    height: 200,
    left: LEFT,
  });
}

/** Calls summed per equal time bucket (in ms, over the axis' domain in seconds); empty buckets left out. */
function bucketed(spans: CallSpan[], domain: [number, number], count: number) {
  const [from, to] = [domain[0] * 1000, domain[1] * 1000];
  const size = (to - from) / count;
  const buckets = Array.from({ length: count }, (_, i) => ({
    from: from + i * size,
    to: from + (i + 1) * size,
    count: 0,
    input: 0,
    output: 0,
  }));
  for (const span of spans) {
    const bucket = buckets[Math.min(count - 1, Math.max(0, Math.floor((span.from - from) / size)))]!;
    bucket.count += 1;
    bucket.input += span.input;
    bucket.output += span.output;
  }
  return buckets.filter((b) => b.count > 0);
}
