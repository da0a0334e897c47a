/**
 * Exponential backoff with jitter, pure (the Trial workflow uses it with its deterministic Math.random): the ceiling
 * doubles from `minMs` per retry up to `maxMs`, and the wait is drawn between half and all of it, so callers that
 * failed together do not come back together.
 */
export function jitteredBackoffMs(minMs: number, maxMs: number, retries: number, random: () => number): number {
  const ceiling = Math.min(maxMs, minMs * 2 ** retries);
  return Math.round(ceiling * (0.5 + random() / 2));
}
