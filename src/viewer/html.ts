/** Server-side rendering: preact components written with htm tagged templates, rendered to static HTML strings. */
import htm from 'htm';
import { h } from 'preact';
import type { ComponentChildren, VNode } from 'preact';
import { render } from 'preact-render-to-string';

/** Every template here has one root element, so it is one VNode (htm types it as VNode | VNode[]). */
export const html = htm.bind(h) as (strings: TemplateStringsArray, ...values: unknown[]) => VNode;
export type { ComponentChildren, VNode };

/** How a page links to others: absolute URLs on the live server, relative file paths in a static bundle. */
export interface LinkContext {
  href(segments: readonly string[], query?: Record<string, string | number | undefined>): string;
  /** A raw file (a download), not a page. */
  file(segments: readonly string[]): string;
  asset(name: string): string;
  /** Live server: filter forms and pagination work; a bundle shows every row instead. */
  live: boolean;
  /** The Temporal UI's base URL, when known. */
  temporalUiUrl: string | null;
  temporalNamespace: string;
}

/**
 * Pages load only the viewer's own scripts and styles (a hosted bundle holds files an agent wrote: none may run as
 * the site). Inline style attributes draw the charts' bars and colours.
 */
const CONTENT_SECURITY_POLICY = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self' 'unsafe-inline'",
  "img-src 'self' data:",
  "form-action 'self'",
  "base-uri 'none'",
].join('; ');

export function document(title: string, ctx: LinkContext, body: VNode, options: { refresh?: boolean } = {}): string {
  return `<!doctype html>\n${render(
    html`<html lang="en">
      <head>
        <meta charset="utf-8" />
        <meta name="viewport" content="width=device-width, initial-scale=1" />
        <meta http-equiv="Content-Security-Policy" content=${CONTENT_SECURITY_POLICY} />
        ${options.refresh && ctx.live ? html`<meta http-equiv="refresh" content="5" />` : null}
        <title>${title} · Rollout</title>
        <link rel="stylesheet" href=${ctx.asset('style.css')} />
      </head>
      <body>
        <header class="top"><a href=${ctx.href([])}>Rollout</a> <span class="muted">results viewer</span></header>
        <main>${body}</main>
        <script src=${ctx.asset('tablesort.min.js')}></script>
        <script src=${ctx.asset('tablesort.number.min.js')}></script>
        <script src=${ctx.asset('viewer.js')}></script>
      </body>
    </html>`
  )}`;
}

export function fmt(value: number | null | undefined, digits = 3): string {
  if (value === null || value === undefined || !Number.isFinite(value)) return '–';
  return Number.isInteger(value) ? String(value) : value.toFixed(digits);
}

/** Background colour of a reward in [0, 1]: red → yellow → green. */
export function rewardColour(value: number | null): string {
  if (value === null) return '#e5e7eb';
  const clamped = Math.max(0, Math.min(1, value));
  return `hsl(${Math.round(clamped * 120)}, 70%, 78%)`;
}

export function bytes(size: number): string {
  if (size < 1024) return `${size} B`;
  if (size < 1024 ** 2) return `${(size / 1024).toFixed(1)} KiB`;
  return `${(size / 1024 ** 2).toFixed(1)} MiB`;
}
