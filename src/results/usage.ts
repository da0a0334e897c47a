/**
 * A trial's model usage and cost, from the gateway's records: the authority for tokens (agents' own logs miss
 * sub-agents, retries and side calls). Cost comes from the price table; a model it does not know makes the cost
 * null, with the reason, rather than a guess. Pure sums (addUsage) are used by the Job workflow too.
 */
import type { TrialUsage } from '../contracts/trial';
import type { LlmCallRecord } from '../gateway/records';
import { callCost, priceOf } from '../budget/workflow/prices';
import { roundUsd } from '../budget/workflow/spend';

export function emptyUsage(): TrialUsage {
  return {
    n_llm_calls: 0,
    input_tokens: 0,
    output_tokens: 0,
    cached_tokens: 0,
    cost_usd: 0,
    n_retried_calls: 0,
    waited_ms: 0,
  };
}

/**
 * Adds one model call (count_tokens and other non-generation calls are not model calls, nor calls the gateway refused).
 * Mutates `usage`.
 */
export function addCall(usage: TrialUsage, call: LlmCallRecord): void {
  if (call.kind !== 'generate' || call.refused) return;
  usage.n_llm_calls += 1;
  if ((call.attempts?.length ?? 1) > 1) usage.n_retried_calls = (usage.n_retried_calls ?? 0) + 1;
  usage.waited_ms = (usage.waited_ms ?? 0) + (call.waited_ms ?? 0);
  if (!call.usage) return;
  usage.input_tokens += call.usage.input_tokens;
  usage.output_tokens += call.usage.output_tokens;
  usage.cached_tokens += call.usage.cached_tokens;
  const price = call.model ? priceOf(call.model) : null;
  if (!price) {
    usage.cost_usd = null;
    usage.cost_unknown_reason ??= call.model
      ? `no price for model "${call.model}" in src/budget/workflow/prices.ts`
      : 'a call named no model';
  } else if (usage.cost_usd !== null) usage.cost_usd = roundUsd(usage.cost_usd + callCost(price, call.usage));
}

/** Sums of usages (a job's per-agent totals): the cost stays null once one part's is unknown. Mutates `total`. */
export function addUsage(total: TrialUsage, part: TrialUsage): TrialUsage {
  total.n_llm_calls += part.n_llm_calls;
  total.input_tokens += part.input_tokens;
  total.output_tokens += part.output_tokens;
  total.cached_tokens += part.cached_tokens;
  // Usages recorded before retries and waits were counted have neither: they count as none.
  if (part.n_retried_calls !== undefined || total.n_retried_calls !== undefined) {
    total.n_retried_calls = (total.n_retried_calls ?? 0) + (part.n_retried_calls ?? 0);
    total.waited_ms = (total.waited_ms ?? 0) + (part.waited_ms ?? 0);
  }
  if (total.cost_usd !== null && part.cost_usd !== null) total.cost_usd = roundUsd(total.cost_usd + part.cost_usd);
  else {
    total.cost_usd = null;
    total.cost_unknown_reason ??= part.cost_unknown_reason;
  }
  return total;
}
