/**
 * Token ids and logprobs on OpenAI Responses replies, as vLLM returns them (vllm/entrypoints/openai/responses/
 * protocol.py, context.py): with `enable_response_messages`, `input_messages` holds the prompt as one
 * `{type: "raw_message_tokens", message, tokens}` and `output_messages` the completion the same way (on the whole
 * response, and on the stream's `response.completed` event); with `include: ["message.output_text.logprobs"]`, each
 * `output_text` part carries `logprobs[]` (and each `response.output_text.delta` event its share). vLLM puts logprobs
 * on text only: a reply that is a tool call has ids but no logprobs. gpt-oss (Harmony) models return messages
 * without ids there.
 */
import type { CallTokens, Json } from '../dialect';
import { arr, idList, num, obj } from '../dialect';

/** The ids of a `raw_message_tokens` list with exactly one entry (more: the server ran turns of its own tools). */
function rawTokens(messages: unknown): number[] | undefined {
  const list = arr(messages);
  if (list.length !== 1 || list[0]!.type !== 'raw_message_tokens') return undefined;
  return idList(list[0]!.tokens);
}

function textLogprobs(response: Json): number[] {
  const out: number[] = [];
  for (const item of arr(response.output)) {
    for (const part of arr(item.content)) {
      if (part.type === 'output_text') out.push(...arr(part.logprobs).map((entry) => num(entry.logprob)));
    }
  }
  return out;
}

export function responseTokens(response: unknown): CallTokens | null {
  const body = obj(response);
  const promptIds = rawTokens(body.input_messages);
  const ids = rawTokens(body.output_messages);
  let logprobs = textLogprobs(body);
  // Logprobs that do not cover every sampled id (text beside a tool call) would misalign: kept only when whole.
  if (ids && logprobs.length !== ids.length) logprobs = [];
  if (!promptIds && !ids && !logprobs.length) return null;
  return {
    ...(promptIds ? { prompt_token_ids: promptIds } : {}),
    ...(ids ? { token_ids: ids } : {}),
    ...(logprobs.length ? { logprobs } : {}),
  };
}

/** A Responses reply, or one stream event, without what `enable_response_messages` and the logprobs include add. */
export function stripResponseTokens(payload: Json, added: string[]): Json {
  const messages = added.includes('enable_response_messages');
  const logprobs = added.includes('message.output_text.logprobs');
  const strip = (response: Json): Json => {
    const out: Json = { ...response };
    if (messages) {
      delete out.input_messages;
      delete out.output_messages;
    }
    if (logprobs && Array.isArray(out.output)) out.output = arr(out.output).map(withoutLogprobs);
    return out;
  };
  let out = strip(payload);
  if (out.response && typeof out.response === 'object') out = { ...out, response: strip(obj(out.response)) };
  if (!logprobs) return out;
  // Stream events: deltas and done events carry a list (empty when not asked for), parts and items as in the output.
  if (Array.isArray(out.logprobs)) out.logprobs = [];
  if (out.part && typeof out.part === 'object') out.part = partWithoutLogprobs(obj(out.part));
  if (out.item && typeof out.item === 'object') out.item = withoutLogprobs(obj(out.item));
  return out;
}

function withoutLogprobs(item: Json): Json {
  return Array.isArray(item.content) ? { ...item, content: arr(item.content).map(partWithoutLogprobs) } : item;
}

function partWithoutLogprobs(part: Json): Json {
  return part.type === 'output_text' && 'logprobs' in part ? { ...part, logprobs: null } : part;
}
