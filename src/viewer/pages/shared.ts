/** What every page shares: times as text, the pager, the not-found page. */
import type { LinkContext, VNode } from '../html';
import { document, html } from '../html';

export function time(iso: string | null | undefined): string {
  return iso ? iso.replace('T', ' ').replace(/\.\d+Z$/, 'Z') : '–';
}

export function pager(
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
