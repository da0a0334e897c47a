/**
 * The scripted model server's vLLM side (a stand-in: no model runs here): a Chat Completions request that asks for
 * token ids (`return_token_ids: true`) or logprobs (`logprobs: true`) gets them in the fields vLLM uses
 * (vllm/entrypoints/openai/chat_completion/protocol.py): `prompt_token_ids` at the top of the response (streamed: in
 * the first chunk only), `choices[].token_ids` (streamed: each chunk's delta tokens) and
 * `choices[].logprobs.content[]` ({token, logprob, bytes, top_logprobs}).
 *
 * Tokenization is deterministic and compositional, like a real chat template over a BPE vocabulary as far as an
 * exact-trajectory test needs: each message renders as `<|im_start|>` role `\n` body `<|im_end|>` `\n` (ChatML, as
 * Qwen's template), the prompt ends with the generation prompt `<|im_start|>assistant\n`, and the completion is the
 * assistant body plus `<|im_end|>`. So a next call whose messages repeat the reply exactly has the previous prompt and
 * completion as its prefix; a reply the agent re-serialised differently (or history it rewrote) does not.
 */
import { createHash } from 'node:crypto';

type Body = Record<string, unknown>;

export const IM_START = 151644;
export const IM_END = 151645;
const VOCAB = 150_000;

/** Words, single digits, single punctuation marks and runs of whitespace, each an id in [1000, VOCAB + 1000). */
export function tokenize(text: string): number[] {
  const pieces = text.match(/\s+|[A-Za-z]+|\d|[^\sA-Za-z\d]/g) ?? [];
  return pieces.map((piece) => 1000 + (createHash('sha1').update(piece).digest().readUInt32BE(0) % VOCAB));
}

/** The logprob the stand-in "sampled" a token with: fixed per id, in (-1, 0). */
export function tokenLogprob(id: number): number {
  return -((((id * 2654435761) >>> 0) % 1000) + 1) / 1001;
}

function text(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return content
    .map((part: unknown) => {
      const p = (part ?? {}) as Body;
      return typeof p.text === 'string' ? p.text : '';
    })
    .join('');
}

/** An assistant message's body as the template writes it: its text, then each tool call as Qwen's `<tool_call>`. */
function assistantBody(message: Body): string {
  const calls = Array.isArray(message.tool_calls) ? (message.tool_calls as Body[]) : [];
  const rendered = calls.map((call) => {
    const fn = (call.function ?? {}) as Body;
    let args: unknown = fn.arguments;
    try {
      args = typeof args === 'string' ? JSON.parse(args) : args;
    } catch {
      // Not JSON: the template writes it as it came.
    }
    return `\n<tool_call>\n${JSON.stringify({ name: fn.name, arguments: args })}\n</tool_call>`;
  });
  return text(message.content) + rendered.join('');
}

function messageIds(role: string, body: string): number[] {
  return [IM_START, ...tokenize(`${role}\n`), ...tokenize(body), IM_END, ...tokenize('\n')];
}

/** The prompt's ids: the tools (as a system block), every message, then the generation prompt. */
export function chatPromptIds(request: Body): number[] {
  const ids: number[] = [];
  if (Array.isArray(request.tools) && request.tools.length > 0)
    ids.push(...messageIds('system', `# Tools\n${JSON.stringify(request.tools)}`));
  for (const message of (Array.isArray(request.messages) ? request.messages : []) as Body[]) {
    const role = String(message.role);
    ids.push(...messageIds(role, role === 'assistant' ? assistantBody(message) : text(message.content)));
  }
  return [...ids, IM_START, ...tokenize('assistant\n')];
}

/** The completion's ids: the reply's body and the end of turn. */
export function chatCompletionIds(message: Body): number[] {
  return [...tokenize(assistantBody(message)), IM_END];
}

function logprobEntries(ids: number[]) {
  return ids.map((id) => ({ token: `token_id:${id}`, logprob: tokenLogprob(id), bytes: [], top_logprobs: [] }));
}

interface Rendering {
  json: unknown;
  events: { event?: string; data: unknown }[];
}

/**
 * Adds what vLLM adds when asked: ids and logprobs on the JSON answer, and on the stream (prompt ids in the first
 * chunk; the completion's ids and logprobs spread over the chunks that carry a choice, in order).
 */
export function withVllmTokens(request: Body, rendering: Rendering): Rendering {
  const wantIds = request.return_token_ids === true;
  const wantLogprobs = request.logprobs === true;
  if (!wantIds && !wantLogprobs) return rendering;
  const json = structuredClone(rendering.json) as Body;
  const choice = (json.choices as Body[])[0]!;
  const promptIds = chatPromptIds(request);
  const completionIds = chatCompletionIds(choice.message as Body);
  if (wantIds) {
    json.prompt_token_ids = promptIds;
    choice.token_ids = completionIds;
  }
  if (wantLogprobs) choice.logprobs = { content: logprobEntries(completionIds) };
  const events = rendering.events.map((e) => ({ ...e, data: structuredClone(e.data) as Body }));
  const carriers = events.filter((e) => Array.isArray(e.data.choices) && e.data.choices.length > 0);
  let next = 0;
  carriers.forEach((event, i) => {
    const share =
      i === carriers.length - 1 ? completionIds.length - next : Math.floor(completionIds.length / carriers.length);
    const ids = completionIds.slice(next, next + share);
    next += share;
    const streamed = (event.data.choices as Body[])[0]!;
    if (wantIds) streamed.token_ids = ids;
    if (wantLogprobs) streamed.logprobs = { content: logprobEntries(ids) };
  });
  if (wantIds && events[0]) events[0].data.prompt_token_ids = promptIds;
  return { json, events };
}
