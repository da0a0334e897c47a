/**
 * A trial's exact token view for RL (`rollout export --format rl`, docs/rl.md), built from the ids the server returned
 * per call (job.yaml `tokens: true`), never by re-tokenizing text.
 *
 * A segment starts with a call's prompt (`prompt_ids`); each later call whose prompt extends the segment so far adds
 * the tokens inserted between the calls (tool results, new user turns, the template's turn markers: loss mask 0) and
 * then its completion (what the model sampled: loss mask 1, one logprob each). A call whose prompt does not extend the
 * segment starts a new segment, and the split says why: nothing is ever glued.
 */

export type SplitReason =
  /** The prompt drops or changes earlier tokens: the agent compacted or truncated its context, or a sub-agent began. */
  | 'history_rewritten'
  /** The prompt differs only inside the previous completion: the server re-tokenized what the model had sampled. */
  | 'retokenized'
  /** A call before this one has no ids (an error, a server that returned none): its tokens are unknown. */
  | 'call_without_tokens';

export interface TokenCall {
  seq: number;
  prompt_token_ids?: number[];
  completion_token_ids?: number[];
  logprobs?: number[];
  policy_version?: number;
}

export interface SegmentCall {
  seq: number;
  policy_version: number | null;
  /** Where this call's sampled tokens lie in the segment's `response_ids` (end exclusive). */
  response_start: number;
  response_end: number;
}

export interface TokenSegment {
  /** Why the segment starts here (null for the first). */
  split: SplitReason | null;
  prompt_ids: number[];
  response_ids: number[];
  loss_mask: (0 | 1)[];
  /** One per 1 in `loss_mask`, in order; null when a call of the segment came without logprobs. */
  logprobs: number[] | null;
  calls: SegmentCall[];
}

export interface TokenView {
  segments: TokenSegment[];
  /** How many segments start for each reason. */
  splits: Partial<Record<SplitReason, number>>;
  calls_without_tokens: number;
}

/** Builds a trial's view call by call (in `seq` order). */
export class TokenViewBuilder {
  private readonly segments: TokenSegment[] = [];
  private readonly splits: Partial<Record<SplitReason, number>> = {};
  private withoutTokens = 0;
  private broken = false;
  /** The current segment's prompt + response, and where its last completion starts in it. */
  private sequence: number[] = [];
  private lastCompletionAt = 0;

  add(call: TokenCall): void {
    const prompt = call.prompt_token_ids;
    const completion = call.completion_token_ids;
    if (!prompt || !completion) {
      this.withoutTokens += 1;
      this.broken = this.segments.length > 0;
      return;
    }
    const current = this.segments.at(-1);
    const extending = current && !this.broken && startsWith(prompt, this.sequence);
    if (!current || !extending) {
      const split = !current ? null : this.broken ? 'call_without_tokens' : this.reason(prompt);
      if (split) this.splits[split] = (this.splits[split] ?? 0) + 1;
      this.segments.push({ split, prompt_ids: prompt, response_ids: [], loss_mask: [], logprobs: [], calls: [] });
      this.sequence = [...prompt];
      this.broken = false;
    }
    const segment = this.segments.at(-1)!;
    const inserted = prompt.slice(this.sequence.length);
    segment.response_ids.push(...inserted);
    segment.loss_mask.push(...inserted.map(() => 0 as const));
    this.sequence.push(...inserted);
    this.lastCompletionAt = this.sequence.length;
    const start = segment.response_ids.length;
    segment.response_ids.push(...completion);
    segment.loss_mask.push(...completion.map(() => 1 as const));
    this.sequence.push(...completion);
    if (segment.logprobs && call.logprobs?.length === completion.length) segment.logprobs.push(...call.logprobs);
    else segment.logprobs = null;
    segment.calls.push({
      seq: call.seq,
      policy_version: call.policy_version ?? null,
      response_start: start,
      response_end: segment.response_ids.length,
    });
  }

  view(): TokenView {
    return { segments: this.segments, splits: this.splits, calls_without_tokens: this.withoutTokens };
  }

  private reason(prompt: number[]): SplitReason {
    let common = 0;
    while (common < prompt.length && common < this.sequence.length && prompt[common] === this.sequence[common])
      common++;
    return common >= this.lastCompletionAt ? 'retokenized' : 'history_rewritten';
  }
}

function startsWith(values: number[], prefix: number[]): boolean {
  if (values.length < prefix.length) return false;
  for (let i = 0; i < prefix.length; i++) if (values[i] !== prefix[i]) return false;
  return true;
}
