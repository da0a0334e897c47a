/**
 * List prices in USD per million tokens, for the models Rollout knows. Unknown models cost null with a reason:
 * a guessed price is worse than none. Cached input is billed at `cached_input` instead of `input`.
 * Sources: the vendors' public price pages (2026-11); update here when they change.
 */
import type { Usage } from '../../contracts/trial';

export interface Price {
  input: number;
  cached_input: number;
  output: number;
}

/** Keyed by model name; a key also matches dated or suffixed variants (`claude-sonnet-4-5-20250929`). */
export const PRICES: Record<string, Price> = {
  'claude-opus-4-1': { input: 15, cached_input: 1.5, output: 75 },
  'claude-opus-4-5': { input: 5, cached_input: 0.5, output: 25 },
  'claude-sonnet-4-5': { input: 3, cached_input: 0.3, output: 15 },
  'claude-sonnet-4': { input: 3, cached_input: 0.3, output: 15 },
  'claude-haiku-4-5': { input: 1, cached_input: 0.1, output: 5 },
  'claude-3-5-haiku': { input: 0.8, cached_input: 0.08, output: 4 },
  'gpt-5': { input: 1.25, cached_input: 0.125, output: 10 },
  'gpt-5-mini': { input: 0.25, cached_input: 0.025, output: 2 },
  'gpt-5-nano': { input: 0.05, cached_input: 0.005, output: 0.4 },
  'gpt-5-codex': { input: 1.25, cached_input: 0.125, output: 10 },
  'gpt-4.1': { input: 2, cached_input: 0.5, output: 8 },
  'gpt-4.1-mini': { input: 0.4, cached_input: 0.1, output: 1.6 },
  'gpt-4o': { input: 2.5, cached_input: 1.25, output: 10 },
  'gpt-4o-mini': { input: 0.15, cached_input: 0.075, output: 0.6 },
  o3: { input: 2, cached_input: 0.5, output: 8 },
  'o4-mini': { input: 1.1, cached_input: 0.275, output: 4.4 },
  'gemini-2.5-pro': { input: 1.25, cached_input: 0.31, output: 10 },
  'gemini-2.5-flash': { input: 0.3, cached_input: 0.075, output: 2.5 },
  'gemini-2.5-flash-lite': { input: 0.1, cached_input: 0.025, output: 0.4 },
  'qwen3-coder-plus': { input: 1, cached_input: 0.1, output: 5 },
};

/** The price of a model: exact name, else the longest key the name starts with (after any `provider/`). */
export function priceOf(model: string): Price | null {
  const name = model.replace(/^.*\//, '').toLowerCase();
  if (PRICES[name]) return PRICES[name];
  const key = Object.keys(PRICES)
    .filter((k) => name.startsWith(`${k}-`) || name.startsWith(`${k}@`))
    .sort((a, b) => b.length - a.length)[0];
  return key ? PRICES[key]! : null;
}

export function callCost(price: Price, usage: Usage): number {
  const uncached = Math.max(0, usage.input_tokens - usage.cached_tokens);
  return (uncached * price.input + usage.cached_tokens * price.cached_input + usage.output_tokens * price.output) / 1e6;
}
