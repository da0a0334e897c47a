/**
 * Scrapes a `/metrics` endpoint and reads it with a Prometheus text-format parser (prom2json's shape; it folds a
 * labelled histogram's series into one, so histograms are read with histogramCount).
 */
import parsePrometheusTextFormat from 'parse-prometheus-text-format';
import type { PrometheusFamily } from 'parse-prometheus-text-format';

export async function scrape(url: string): Promise<PrometheusFamily[] & { text: string }> {
  const response = await fetch(url, { signal: AbortSignal.timeout(10_000) });
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
  const text = await response.text();
  return Object.assign(parsePrometheusTextFormat(text), { text });
}

/** A histogram series' `_count` (its labels exactly as given, in order), or 0. */
export function histogramCount(text: string, name: string, labels: Record<string, string>): number {
  const selector = Object.entries(labels)
    .map(([key, value]) => `${key}="${value}"`)
    .join(',');
  const line = text.split('\n').find((candidate) => candidate.startsWith(`${name}_count{${selector}} `));
  return line ? Number(line.split(' ').at(-1)) : 0;
}

/**
 * The sum of a family's samples whose labels include `labels` (a counter's or gauge's values, a histogram's counts);
 * 0 when none match.
 */
export function sampleSum(families: PrometheusFamily[], name: string, labels: Record<string, string> = {}): number {
  const family = families.find((candidate) => candidate.name === name);
  let sum = 0;
  for (const sample of family?.metrics ?? []) {
    if (Object.entries(labels).every(([key, value]) => sample.labels?.[key] === value)) {
      sum += Number(sample.value ?? sample.count ?? 0);
    }
  }
  return sum;
}
