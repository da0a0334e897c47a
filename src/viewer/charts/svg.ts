/**
 * Charts drawn on the server as inline SVG (no client code): a frame with a title and description for screen
 * readers, labelled axes with ticks, and the marks each chart puts inside. Every chart bounds its number of marks
 * (callers bin or aggregate), so a page stays small whatever the job's size.
 */
import type { VNode } from '../html';
import { html } from '../html';

export const WIDTH = 560;
export const HEIGHT = 240;
const MARGIN = { left: 56, right: 16, top: 12, bottom: 40 };

/** One colour per series (agents first to last), repeating after ten. */
const PALETTE = [
  '#2563eb',
  '#dc2626',
  '#16a34a',
  '#d97706',
  '#7c3aed',
  '#0891b2',
  '#db2777',
  '#65a30d',
  '#475569',
  '#ea580c',
];
export function colour(index: number): string {
  return PALETTE[index % PALETTE.length]!;
}

export interface Scale {
  (value: number): number;
  domain: [number, number];
}

/** A linear map from `domain` to pixels; an empty domain is widened so that nothing divides by zero. */
export function linear(domain: [number, number], range: [number, number]): Scale {
  const [d0, d1] = domain[0] === domain[1] ? [domain[0] - 0.5, domain[1] + 0.5] : domain;
  const scale = ((value: number) => range[0] + ((value - d0) / (d1 - d0)) * (range[1] - range[0])) as Scale;
  scale.domain = [d0, d1];
  return scale;
}

/** About `count` round tick values (1, 2 or 5 × 10^k apart) covering [min, max]. */
export function niceTicks(min: number, max: number, count = 5): number[] {
  if (!(max > min)) return [min];
  const raw = (max - min) / count;
  const power = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= raw) ?? raw;
  const ticks: number[] = [];
  for (let v = Math.ceil(min / step) * step; v <= max + step * 1e-9; v += step) ticks.push(Number(v.toPrecision(12)));
  return ticks;
}

/** The plotting area of a chart of the given size. */
export function plotArea(
  width = WIDTH,
  height = HEIGHT,
  left = MARGIN.left
): { x: [number, number]; y: [number, number] } {
  return { x: [left, width - MARGIN.right], y: [height - MARGIN.bottom, MARGIN.top] };
}

export interface Tick {
  at: number;
  label: string;
}

export interface ChartProps {
  id: string;
  title: string;
  /** What the chart shows, in words (read by screen readers; also the hover text of the whole chart). */
  desc: string;
  xLabel: string;
  yLabel: string;
  /** Tick positions in pixels, with their labels. */
  xTicks: Tick[];
  yTicks: Tick[];
  marks: (VNode | null)[];
  legend?: { label: string; colour: string }[];
  width?: number;
  height?: number;
  /** Room for the y labels, when they are words. */
  left?: number;
}

export function chart(props: ChartProps): VNode {
  const width = props.width ?? WIDTH;
  const height = props.height ?? HEIGHT;
  const area = plotArea(width, height, props.left);
  const [left, right] = area.x;
  const [bottom, top] = area.y;
  return html`<figure class="chart" id=${props.id}>
    <svg
      xmlns="http://www.w3.org/2000/svg"
      role="img"
      aria-labelledby=${`${props.id}-title ${props.id}-desc`}
      viewBox=${`0 0 ${width} ${height}`}
      width=${width}
      height=${height}
    >
      <title id=${`${props.id}-title`}>${props.title}</title>
      <desc id=${`${props.id}-desc`}>${props.desc}</desc>
      <g class="grid">
        ${props.yTicks.map((tick) => html`<line x1=${left} x2=${right} y1=${tick.at} y2=${tick.at} />`)}
      </g>
      <g class="axis y-axis">
        <line x1=${left} x2=${left} y1=${top} y2=${bottom} />
        ${props.yTicks.map((tick) => html`<text x=${left - 6} y=${tick.at + 4} text-anchor="end">${tick.label}</text>`)}
        <text class="label" transform=${`translate(14 ${(top + bottom) / 2}) rotate(-90)`} text-anchor="middle">
          ${props.yLabel}
        </text>
      </g>
      <g class="axis x-axis">
        <line x1=${left} x2=${right} y1=${bottom} y2=${bottom} />
        ${props.xTicks.map(
          (tick) => html`<text x=${tick.at} y=${bottom + 16} text-anchor="middle">${tick.label}</text>`
        )}
        <text class="label" x=${(left + right) / 2} y=${height - 4} text-anchor="middle">${props.xLabel}</text>
      </g>
      <g class="marks">${props.marks}</g>
    </svg>
    ${
      props.legend?.length
        ? html`<figcaption class="legend">
            ${props.legend.map(
              (item) => html`<span class="key"><i style=${`background:${item.colour}`}></i>${item.label}</span> `
            )}
          </figcaption>`
        : null
    }
  </figure>`;
}

/** A short number for an axis: 1.5k, 2M, 0.25. */
export function short(value: number): string {
  const abs = Math.abs(value);
  if (abs >= 1e6) return `${Number((value / 1e6).toPrecision(3))}M`;
  if (abs >= 1e3) return `${Number((value / 1e3).toPrecision(3))}k`;
  return String(Number(value.toPrecision(3)));
}

/** Ticks of a scale over its domain, labelled with `label`. */
export function ticksOf(scale: Scale, label: (value: number) => string = short, count = 5): Tick[] {
  return niceTicks(scale.domain[0], scale.domain[1], count).map((value) => ({ at: scale(value), label: label(value) }));
}

/** A polyline through points, as an SVG path. */
export function pathOf(points: [number, number][]): string {
  return points.map(([x, y], i) => `${i ? 'L' : 'M'}${x.toFixed(1)},${y.toFixed(1)}`).join('');
}

/** A chart that has nothing to draw yet says so in its place. */
export function emptyChart(id: string, title: string, message: string): VNode {
  return html`<figure class="chart empty" id=${id}>
    <figcaption><b>${title}</b> <span class="muted">${message}</span></figcaption>
  </figure>`;
}
