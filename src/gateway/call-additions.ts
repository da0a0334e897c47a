/**
 * What the gateway adds to a model call on the agent's behalf, and takes out of the reply again: job.yaml
 * `tokens: true` (the upstream's own parameters for token ids and logprobs, e.g. vLLM's `return_token_ids` and
 * `logprobs`) and `sampling` (parameters enforced on every call, whatever the agent sent). A field the gateway asked
 * for and the agent did not is stripped from what the agent receives (JSON and each SSE event), so the agent sees
 * what it would have seen; the record keeps the whole reply. Usage is asked for on every stream (OpenAI Chat's
 * `stream_options.include_usage`) whatever the job says: without it a stream could not be counted against budgets.
 */
import type { CallTokens, Dialect, Json } from './dialect';
import type { LlmCallRecord } from './records';

/** job.yaml `agents[].sampling`: parameter name to value, set on every generation call. */
export type Sampling = Record<string, number | string | boolean>;

export interface CallShaping {
  tokens?: boolean;
  sampling?: Sampling;
}

/** A trial's options for RL (docs/rl.md). */
export interface TrainingOptions {
  /** The agent's job.yaml `tokens` and `sampling`: added to each generation call. */
  shaping?: CallShaping;
  /** The agent's job.yaml `replicas`: OpenAI-style base URLs of one model; this trial's calls all go to one. */
  replicas?: string[];
  /** The job's policy version now (job.yaml `policy_version`, `rollout ctl <job> policy-version N`); stamped per call. */
  policyVersion?: () => Promise<number | null>;
  /** A line for the trial's log (a replica that died and the replica the trial moved to). */
  note?: (line: string) => void;
}

/** A request as the gateway sends it upstream. */
export interface ShapedCall {
  body: Json;
  /** Request fields the gateway set that the agent had not: their reply fields are stripped again. */
  added: string[];
  /** Token ids were asked for (job.yaml `tokens: true` on a dialect that has them). */
  tokens: boolean;
  /** Sampling parameters the gateway set, with the agent's own value where it sent one (null: it sent none). */
  sampling: { enforced: Sampling; agent: Record<string, unknown> } | null;
}

/**
 * Usage asked for on the stream (every call: budgets and limits count it), then the token parameters and the sampling
 * (`shaping`, a trial's job.yaml settings); null when the call goes as the agent sent it.
 */
export function shapeCall(dialect: Dialect, body: Json, shaping: CallShaping = {}): ShapedCall | null {
  const tokens = shaping.tokens === true && dialect.requestTokens !== undefined;
  const sampling = shaping.sampling && Object.keys(shaping.sampling).length > 0 ? shaping.sampling : null;
  const usage = dialect.askUsage?.(body) ?? null;
  if (!tokens && !sampling && !usage) return null;
  const shaped: Json = { ...(usage?.body ?? body) };
  const added: string[] = usage ? [usage.added] : [];
  if (tokens) added.push(...dialect.requestTokens!(shaped));
  let record: ShapedCall['sampling'] = null;
  if (sampling) {
    const agent: Record<string, unknown> = {};
    for (const [key, value] of Object.entries(sampling)) {
      // OpenAI's newer name for the cap wins upstream when both are sent: the enforced cap goes where the agent put it.
      const target = key === 'max_tokens' && shaped.max_completion_tokens !== undefined ? 'max_completion_tokens' : key;
      agent[target] = shaped[target] ?? null;
      shaped[target] = value;
    }
    record = { enforced: { ...sampling }, agent };
  }
  return { body: shaped, added, tokens, sampling: record };
}

/**
 * Takes the fields of `added` request parameters out of a reply (a whole response or one stream event's payload);
 * null: the event was wholly theirs, and is dropped.
 */
export type ReplyFilter = (payload: Json) => Json | null;

export function replyFilter(dialect: Dialect, added: string[]): ReplyFilter | null {
  if (added.length === 0 || !dialect.stripAdded) return null;
  return (payload) => dialect.stripAdded!(payload, added);
}

/** What a call's record keeps for training: the gateway's additions, the call's tokens, the policy version. */
export function trainingFields(
  shaped: ShapedCall | null,
  tokens: CallTokens | null,
  policyVersion: number | null | undefined
): Partial<LlmCallRecord> {
  return {
    ...(shaped?.added.length ? { added: shaped.added } : {}),
    ...(shaped?.sampling ? { sampling: shaped.sampling } : {}),
    ...(shaped?.tokens && !(tokens?.prompt_token_ids && tokens.token_ids) ? { tokens_missing: true as const } : {}),
    ...(tokens?.prompt_token_ids ? { prompt_token_ids: tokens.prompt_token_ids } : {}),
    ...(tokens?.token_ids ? { completion_token_ids: tokens.token_ids } : {}),
    ...(tokens?.logprobs ? { logprobs: tokens.logprobs } : {}),
    ...(typeof policyVersion === 'number' ? { policy_version: policyVersion } : {}),
  };
}
