import type { RegistryDataset } from '../contracts/registry';
import { describeSpend } from '../budget/workflow/spend';
import type { JobBudgetResult } from '../budget/workflow/spend';
import type { JobResult } from '../results/job-result';
import { TOO_FEW_TASKS_NOTE, lacksInterval } from '../results/statistics';
import type { TrialUsage } from '../contracts/trial';
import { formatDuration } from './progress';

/** The final summary: the metrics table, then trial and error counts. */
export function renderReport(result: JobResult): string {
  const lines = [renderEvals(result.evals)];
  // Results written before the gateway have no usage.
  const usage = Object.entries(result.usage_by_agent ?? {});
  if (usage.length) lines.push('', renderUsage(usage), '');
  lines.push(
    `trials: ${result.n_total_trials} total, ${result.n_completed_trials} completed, ${result.n_errored_trials} errored, ` +
      `${result.n_infrastructure_errors} infrastructure errors, ${result.n_cancelled_trials} cancelled`
  );
  const errors = Object.entries(result.errors_by_type);
  if (errors.length) lines.push(`errors: ${errors.map(([type, n]) => `${type} ×${n}`).join(', ')}`);
  if (result.budget) lines.push(renderBudget(result.budget));
  return lines.join('\n');
}

/** Spend against job.yaml `budget`, in all and per agent; how to carry on when it is spent. */
export function renderBudget(budget: JobBudgetResult): string {
  const lines = [`budget: spent ${describeSpend(budget.spent, budget.limits)}`];
  for (const [agent, spend] of Object.entries(budget.spent_by_agent))
    lines.push(`  ${agent}: ${describeSpend(spend, null)}`);
  if (budget.exhausted) {
    lines.push(
      `budget spent (${budget.exhausted}): raise it in job.yaml and run it again, or \`rollout ctl <job> budget cost_usd=…\` while it runs`
    );
  }
  return lines.join('\n');
}

const OTHER_METRICS = ['sum', 'min', 'max'] as const;

/**
 * One row per agent × dataset × reward key: n (trials the key is summarised over), the mean with its 95% interval,
 * the other configured metrics and pass@k when tasks had several attempts.
 */
export function renderEvals(evals: JobResult['evals']): string {
  const all = Object.values(evals).flatMap((e) => Object.values(e.metrics));
  const others = OTHER_METRICS.filter((name) => all.some((m) => m[name] !== undefined));
  const maxK = Math.max(0, ...all.map((m) => Object.keys(m.pass_at_k ?? {}).length));
  const passKs = Array.from({ length: maxK }, (_, i) => String(i + 1));
  const header = ['agent', 'dataset', 'reward', 'n', 'trials', 'errors', 'mean', 'ci95', ...others];
  header.push(...passKs.map((k) => `pass@${k}`));
  const rows: string[][] = [];
  for (const evaluation of Object.values(evals)) {
    const keys = Object.keys(evaluation.metrics);
    for (const key of keys.length ? keys : ['–']) {
      const metric = evaluation.metrics[key];
      rows.push([
        evaluation.agent,
        evaluation.dataset,
        key,
        formatNumber(metric?.n),
        String(evaluation.n_trials),
        String(evaluation.n_errors),
        formatNumber(metric?.mean),
        metric?.ci95 ? `[${formatNumber(metric.ci95[0])}, ${formatNumber(metric.ci95[1])}]` : '–',
        ...others.map((name) => formatNumber(metric?.[name])),
        ...passKs.map((k) => formatNumber(metric?.pass_at_k?.[k])),
      ]);
    }
  }
  const table = renderTable([header, ...rows]);
  return lacksInterval(all) ? `${table}\n${TOO_FEW_TASKS_NOTE}` : table;
}

/** `rollout datasets list`: one row per dataset version. */
export function renderDatasetList(registry: RegistryDataset[]): string {
  const rows = registry.map((dataset) => [
    dataset.name,
    dataset.version,
    String(dataset.tasks.length),
    dataset.description.replace(/\s+/g, ' '),
  ]);
  return renderTable([['name', 'version', 'tasks', 'description'], ...rows]);
}

/** Model calls, tokens, cost, retried calls and time waited per agent, as the gateway recorded them. */
export function renderUsage(usage: [string, TrialUsage][]): string {
  const header = ['agent', 'llm calls', 'retried', 'waited', 'input tokens', 'cached', 'output tokens', 'cost (USD)'];
  const rows = usage.map(([agent, u]) => [
    agent,
    String(u.n_llm_calls),
    u.n_retried_calls === undefined ? '–' : String(u.n_retried_calls),
    u.waited_ms === undefined ? '–' : formatDuration(u.waited_ms),
    String(u.input_tokens),
    String(u.cached_tokens),
    String(u.output_tokens),
    u.cost_usd === null ? `unknown: ${u.cost_unknown_reason ?? 'no price'}` : u.cost_usd.toFixed(4),
  ]);
  return renderTable([header, ...rows]);
}

function formatNumber(value: number | undefined): string {
  if (value === undefined) return '';
  return Number.isInteger(value) ? String(value) : value.toFixed(3);
}

export function renderTable(rows: string[][]): string {
  const widths = rows[0]!.map((_, column) => Math.max(...rows.map((row) => (row[column] ?? '').length)));
  const format = (row: string[]) =>
    row
      .map((cell, column) => cell.padEnd(widths[column]!))
      .join('  ')
      .trimEnd();
  return [format(rows[0]!), widths.map((w) => '─'.repeat(w)).join('  '), ...rows.slice(1).map(format)].join('\n');
}
