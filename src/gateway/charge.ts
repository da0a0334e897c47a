/**
 * What a model call may cost before its usage is known: the input estimated from the request's size (a token per 3
 * bytes of JSON, more than any tokenizer gives for text) plus the output the request allows (its max-tokens field,
 * per dialect, else DEFAULT_MAX_OUTPUT_TOKENS). The gateway holds this much of a job's budget while the call is in
 * flight, and charges it when the call ends without usage (a stream cut, the agent gone): never less than it may
 * have cost.
 */
import type { Usage } from './dialect';
import { obj } from './dialect';

/** The output assumed when a request sets no maximum (models' usual output caps are 32k to 128k). */
export const DEFAULT_MAX_OUTPUT_TOKENS = 32_768;

/** The output cap a request asks for, in any dialect's field; null when it sets none. */
export function requestedMaxOutput(body: Record<string, unknown>): number | null {
  const generation = obj(body.generationConfig);
  for (const value of [
    body.max_completion_tokens,
    body.max_tokens,
    body.max_output_tokens,
    generation.maxOutputTokens,
  ]) {
    if (typeof value === 'number' && Number.isFinite(value) && value > 0) return Math.ceil(value);
  }
  return null;
}

export function conservativeUsage(bodyBytes: number, body: Record<string, unknown>): Usage {
  return {
    input_tokens: Math.ceil(bodyBytes / 3),
    output_tokens: requestedMaxOutput(body) ?? DEFAULT_MAX_OUTPUT_TOKENS,
    cached_tokens: 0,
  };
}

/**
 * What a call the vendor may have billed is charged instead of its usage (its record's `charged`), or undefined when
 * its usage counts as it came: with no usage, or a partial one because the call was cut (an Anthropic stream's first
 * event says 1 output token), the call counts its estimate, or what the usage says where that is more.
 */
export function chargeOf(estimate: Usage, usage: Usage | null, cut: boolean): Usage | undefined {
  if (usage && !cut) return undefined;
  return {
    input_tokens: Math.max(estimate.input_tokens, usage?.input_tokens ?? 0),
    output_tokens: Math.max(estimate.output_tokens, usage?.output_tokens ?? 0),
    cached_tokens: 0,
  };
}
