import type { JobResult } from '../results/job-result';

/** The final summary: the metrics table, then trial and error counts. */
export function renderReport(result: JobResult): string {
  const lines = [renderEvals(result.evals)];
  lines.push(
    `trials: ${result.n_total_trials} total, ${result.n_completed_trials} completed, ${result.n_errored_trials} errored, ` +
      `${result.n_infrastructure_errors} infrastructure errors, ${result.n_cancelled_trials} cancelled`
  );
  const errors = Object.entries(result.errors_by_type);
  if (errors.length) lines.push(`errors: ${errors.map(([type, n]) => `${type} ×${n}`).join(', ')}`);
  return lines.join('\n');
}

/** One row per agent × dataset × reward key, a column per metric. */
export function renderEvals(evals: JobResult['evals']): string {
  const metricNames = [
    ...new Set(Object.values(evals).flatMap((e) => Object.values(e.metrics).flatMap((m) => Object.keys(m)))),
  ];
  const header = ['agent', 'dataset', 'reward', 'trials', 'errors', ...metricNames];
  const rows: string[][] = [];
  for (const evaluation of Object.values(evals)) {
    const keys = Object.keys(evaluation.metrics);
    for (const key of keys.length ? keys : ['–']) {
      rows.push([
        evaluation.agent,
        evaluation.dataset,
        key,
        String(evaluation.n_trials),
        String(evaluation.n_errors),
        ...metricNames.map((name) => formatNumber(evaluation.metrics[key]?.[name])),
      ]);
    }
  }
  return table([header, ...rows]);
}

function formatNumber(value: number | undefined): string {
  if (value === undefined) return '';
  return Number.isInteger(value) ? String(value) : value.toFixed(4);
}

function table(rows: string[][]): string {
  const widths = rows[0]!.map((_, column) => Math.max(...rows.map((row) => (row[column] ?? '').length)));
  const format = (row: string[]) =>
    row
      .map((cell, column) => cell.padEnd(widths[column]!))
      .join('  ')
      .trimEnd();
  return [format(rows[0]!), widths.map((w) => '─'.repeat(w)).join('  '), ...rows.slice(1).map(format)].join('\n');
}
