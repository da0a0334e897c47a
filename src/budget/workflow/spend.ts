/**
 * Spend against job.yaml `budget` (the whole job) and an agent's `limits` (each trial): what a model call costs, sums
 * of it, and when a limit is reached. Pure: the budget ledger workflow folds spend with it, the gateway checks calls.
 * Tokens are input plus output tokens (cached ones included in input); a model without a price adds its tokens to
 * `tokens` and `unpriced_tokens`, and no cost (a guessed price is worse than none).
 */
import type { Usage } from '../../contracts/trial';
import { callCost, priceOf } from './prices';

/** job.yaml `budget`: caps on the job's whole spend; an absent key is no cap. */
export interface BudgetLimits {
  cost_usd?: number;
  tokens?: number;
}

/** An agent's job.yaml `limits`: caps on each trial's agent run. */
export interface TrialLimits extends BudgetLimits {
  llm_calls?: number;
}

export interface Spend {
  cost_usd: number;
  tokens: number;
  llm_calls: number;
  /** Of `tokens`, those of models without a price (their cost is not in `cost_usd`). */
  unpriced_tokens: number;
  unpriced_models: string[];
}

/** result.json's `budget` section: the job's budget, and what it spent on all workers (all its runs). */
export interface JobBudgetResult {
  limits: BudgetLimits;
  spent: Spend;
  spent_by_agent: Record<string, Spend>;
  /** Which limit was reached ("cost_usd 50.0132 of 50"), or null. */
  exhausted: string | null;
}

/** That section of a job's result.json, read where the job's spend is kept; undefined: the job has none. */
export type JobBudgetReader = (jobName: string) => Promise<JobBudgetResult | undefined>;

/** One trial session's spend so far on one gateway (cumulative: each report replaces the last). */
export interface SessionReport {
  /** Unique per gateway session (a trial's agent run on one worker). */
  session: string;
  agent: string;
  spend: Spend;
  /** The session closed: no more reports follow (its entry is folded into the totals). */
  final: boolean;
}

export interface LedgerView {
  budget: BudgetLimits;
  spent: Spend;
  /** Which limit the spend has reached, or null. */
  exhausted: string | null;
}

export function emptySpend(): Spend {
  return { cost_usd: 0, tokens: 0, llm_calls: 0, unpriced_tokens: 0, unpriced_models: [] };
}

/** A copy (workflows have no structuredClone). */
export function copySpend(spend: Spend): Spend {
  return { ...spend, unpriced_models: [...spend.unpriced_models] };
}

/** Adds one model call (its usage when it returned one). Mutates `spend`. */
export function addCallSpend(spend: Spend, model: string | null, usage: Usage | null): Spend {
  spend.llm_calls += 1;
  if (!usage) return spend;
  const tokens = usage.input_tokens + usage.output_tokens;
  spend.tokens += tokens;
  const price = model ? priceOf(model) : null;
  if (price) spend.cost_usd = roundUsd(spend.cost_usd + callCost(price, usage));
  else {
    spend.unpriced_tokens += tokens;
    const name = model ?? '(no model named)';
    if (!spend.unpriced_models.includes(name)) spend.unpriced_models.push(name);
  }
  return spend;
}

/** `total` + `part` (`sign` -1: minus). Mutates `total`. */
export function addSpend(total: Spend, part: Spend, sign: 1 | -1 = 1): Spend {
  total.cost_usd = roundUsd(total.cost_usd + sign * part.cost_usd);
  total.tokens += sign * part.tokens;
  total.llm_calls += sign * part.llm_calls;
  total.unpriced_tokens += sign * part.unpriced_tokens;
  for (const model of part.unpriced_models)
    if (!total.unpriced_models.includes(model)) total.unpriced_models.push(model);
  return total;
}

/** Which limit `spend` has reached, as a sentence ("cost_usd 2.0113 of 2"), or null while under all of them. */
export function limitReached(spend: Spend, limits: TrialLimits): string | null {
  if (limits.cost_usd !== undefined && spend.cost_usd >= limits.cost_usd)
    return `cost_usd ${spend.cost_usd.toFixed(4)} of ${limits.cost_usd}`;
  if (limits.tokens !== undefined && spend.tokens >= limits.tokens) return `tokens ${spend.tokens} of ${limits.tokens}`;
  if (limits.llm_calls !== undefined && spend.llm_calls >= limits.llm_calls)
    return `llm_calls ${spend.llm_calls} of ${limits.llm_calls}`;
  return null;
}

/** The smallest share of a limit still left (1: untouched or no limit; 0 or less: reached). */
export function shareLeft(spend: Spend, limits: BudgetLimits): number {
  let share = 1;
  if (limits.cost_usd !== undefined) share = Math.min(share, 1 - spend.cost_usd / limits.cost_usd);
  if (limits.tokens !== undefined) share = Math.min(share, 1 - spend.tokens / limits.tokens);
  return share;
}

/** "$1.2345 of $50 · 120000 of 2000000 tokens" (what status lines show). */
export function describeSpend(spend: Spend, budget: BudgetLimits | null): string {
  const cost = `$${spend.cost_usd.toFixed(4)}${budget?.cost_usd !== undefined ? ` of $${budget.cost_usd}` : ''}`;
  const tokens = `${spend.tokens}${budget?.tokens !== undefined ? ` of ${budget.tokens}` : ''} tokens`;
  const unpriced =
    spend.unpriced_tokens > 0 ? ` (${spend.unpriced_tokens} tokens unpriced: ${spend.unpriced_models.join(', ')})` : '';
  return `${cost} · ${tokens} · ${spend.llm_calls} calls${unpriced}`;
}

/** Dollars to 1e-8 (a hundredth of a cent per million calls): sums without float noise. */
export function roundUsd(value: number): number {
  return Math.round(value * 1e8) / 1e8;
}
