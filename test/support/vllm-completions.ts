/**
 * The scripted model server's vLLM Completions and Responses sides (a stand-in: no model runs here), with the same
 * deterministic ChatML tokenization as ./vllm-tokens.ts.
 *
 * Completions (`POST /v1/completions`, vllm/entrypoints/openai/completion/protocol.py): `prompt` is text (its
 * `<|im_start|>` / `<|im_end|>` markers are the special ids) or token ids (token-in); the answer is the scripted turn
 * as text (a tool turn as Qwen's `<tool_call>` block); `return_token_ids` adds `choices[].prompt_token_ids` (streamed:
 * the first chunk) and `choices[].token_ids` (streamed: each chunk's delta); `logprobs: N` adds
 * `choices[].logprobs.{tokens, token_logprobs, top_logprobs, text_offset}`.
 *
 * Responses (`POST /v1/responses`, vllm/entrypoints/openai/responses/protocol.py): `enable_response_messages` adds
 * `input_messages` / `output_messages` (one `raw_message_tokens` each) to the response and to the
 * `response.completed` event; `include: ["message.output_text.logprobs"]` adds `logprobs[]` to `output_text` parts
 * and to `response.output_text.delta` events (text only: a tool call gets none, as vLLM).
 */
import { IM_END, IM_START, chatCompletionIds, chatPromptIds, tokenLogprob, tokenize } from './vllm-tokens';

type Body = Record<string, unknown>;

const ASSISTANT = tokenize('assistant\n');
const SPECIAL: Record<string, number> = { '<|im_start|>': IM_START, '<|im_end|>': IM_END };

/** A text prompt's ids: the ChatML markers are single special ids, the rest as ./vllm-tokens.ts tokenizes. */
export function tokenizeText(text: string): number[] {
  return text
    .split(/(<\|im_start\|>|<\|im_end\|>)/)
    .flatMap((piece) => (piece in SPECIAL ? [SPECIAL[piece]!] : tokenize(piece)));
}

export function completionsPromptIds(request: Body): number[] {
  const prompt = request.prompt;
  if (Array.isArray(prompt) && prompt.every((id) => typeof id === 'number')) return prompt;
  return tokenizeText(typeof prompt === 'string' ? prompt : '');
}

/** The turn a Completions prompt is at: the assistant turns it holds before its generation prompt. */
export function completionsTurnIndex(request: Body): number {
  const ids = completionsPromptIds(request);
  let turns = 0;
  for (let i = 0; i < ids.length; i++) {
    if (ids[i] === IM_START && ASSISTANT.every((id, j) => ids[i + 1 + j] === id)) turns++;
  }
  return Math.max(0, turns - 1);
}

/** The shell tool a Completions prompt implies (the scripted server's tool turns need one). */
export const COMPLETIONS_TOOL = {
  name: 'bash',
  schema: { type: 'object', properties: { command: { type: 'string' } } },
  freeform: false,
};

export type TextReply = { kind: 'text'; text: string } | { kind: 'tool'; name: string; args: unknown };

export function replyText(reply: TextReply): string {
  return reply.kind === 'text'
    ? reply.text
    : `<tool_call>\n${JSON.stringify({ name: reply.name, arguments: reply.args })}\n</tool_call>`;
}

interface Rendering {
  json: unknown;
  events: { event?: string; data: unknown }[];
}

export function completionsAnswer(
  request: Body,
  reply: TextReply,
  usage: { input_tokens: number; output_tokens: number },
  model: string,
  key: string
): Rendering {
  const text = replyText(reply);
  const completionIds = [...tokenize(text), IM_END];
  const wantIds = request.return_token_ids === true;
  const wantLogprobs = typeof request.logprobs === 'number';
  const id = `cmpl-${key}`;
  const logprobs = (ids: number[]) => ({
    tokens: ids.map((t) => `token_id:${t}`),
    token_logprobs: ids.map(tokenLogprob),
    top_logprobs: ids.map(() => null),
    text_offset: ids.map(() => 0),
  });
  const choice = (part: string, ids: number[], finish: string | null, first: boolean) => ({
    index: 0,
    text: part,
    logprobs: wantLogprobs ? logprobs(ids) : null,
    finish_reason: finish,
    ...(wantIds ? { token_ids: ids, ...(first ? { prompt_token_ids: completionsPromptIds(request) } : {}) } : {}),
  });
  const apiUsage = {
    prompt_tokens: usage.input_tokens,
    completion_tokens: usage.output_tokens,
    total_tokens: usage.input_tokens + usage.output_tokens,
  };
  const base = { id, object: 'text_completion', created: 0, model };
  const half = Math.floor(completionIds.length / 2);
  const cut = Math.ceil(text.length / 2);
  return {
    json: { ...base, choices: [choice(text, completionIds, 'stop', true)], usage: apiUsage },
    events: [
      { data: { ...base, choices: [choice(text.slice(0, cut), completionIds.slice(0, half), null, true)] } },
      { data: { ...base, choices: [choice(text.slice(cut), completionIds.slice(half), 'stop', false)] } },
      { data: { ...base, choices: [], usage: apiUsage } },
    ],
  };
}

/** A Responses request as the Chat messages its template renders (instructions, items, consecutive calls merged). */
function responsesAsChat(request: Body, items: Body[]): Body {
  const messages: Body[] = [];
  if (typeof request.instructions === 'string') messages.push({ role: 'system', content: request.instructions });
  let assistant: Body | null = null;
  for (const item of items) {
    const type = typeof item.type === 'string' ? item.type : 'message';
    if (type === 'function_call' || type === 'custom_tool_call') {
      if (!assistant) messages.push((assistant = { role: 'assistant', content: '', tool_calls: [] }));
      const args = type === 'custom_tool_call' ? JSON.stringify({ input: item.input }) : item.arguments;
      (assistant.tool_calls as Body[]).push({ function: { name: item.name, arguments: args } });
    } else if (type === 'message' && item.role === 'assistant') {
      if (!assistant) messages.push((assistant = { role: 'assistant', content: '', tool_calls: [] }));
      assistant.content = String(assistant.content) + partsText(item.content);
    } else if (type === 'function_call_output' || type === 'custom_tool_call_output') {
      assistant = null;
      messages.push({ role: 'tool', content: typeof item.output === 'string' ? item.output : partsText(item.output) });
    } else if (type === 'message') {
      assistant = null;
      messages.push({ role: typeof item.role === 'string' ? item.role : 'user', content: partsText(item.content) });
    }
  }
  return { tools: request.tools, messages };
}

function partsText(content: unknown): string {
  if (typeof content === 'string') return content;
  return (Array.isArray(content) ? (content as Body[]) : [])
    .map((p) => (typeof p.text === 'string' ? p.text : ''))
    .join('');
}

export function withVllmResponsesTokens(request: Body, rendering: Rendering): Rendering {
  const wantMessages = request.enable_response_messages === true;
  const wantLogprobs = Array.isArray(request.include) && request.include.includes('message.output_text.logprobs');
  if (!wantMessages && !wantLogprobs) return rendering;
  const input = typeof request.input === 'string' ? [{ role: 'user', content: request.input }] : request.input;
  const promptIds = chatPromptIds(responsesAsChat(request, (input ?? []) as Body[]));
  const json = structuredClone(rendering.json) as Body;
  const output = json.output as Body[];
  const reply = responsesAsChat({}, output).messages as Body[];
  const completionIds = chatCompletionIds(reply[0] ?? { role: 'assistant', content: '' });
  const entries = (ids: number[]) =>
    ids.map((id) => ({ token: `token_id:${id}`, logprob: tokenLogprob(id), bytes: [], top_logprobs: [] }));
  const raw = (ids: number[]) => [{ type: 'raw_message_tokens', message: '', tokens: ids }];
  const addTo = (response: Body) => {
    if (wantMessages) Object.assign(response, { input_messages: raw(promptIds), output_messages: raw(completionIds) });
    if (wantLogprobs) {
      for (const item of (response.output ?? []) as Body[])
        for (const part of (item.content ?? []) as Body[])
          if (part.type === 'output_text') part.logprobs = entries(completionIds);
    }
  };
  addTo(json);
  const events = rendering.events.map((e) => ({ ...e, data: structuredClone(e.data) as Body }));
  for (const event of events) if (event.data.type === 'response.completed') addTo(event.data.response as Body);
  // The deltas' logprobs: the completion's ids spread over them, in order.
  const deltas = events.filter((e) => e.data.type === 'response.output_text.delta');
  if (wantLogprobs && deltas.length) {
    const share = Math.floor(completionIds.length / deltas.length);
    deltas.forEach((e, i) => {
      const ids = completionIds.slice(i * share, i === deltas.length - 1 ? undefined : (i + 1) * share);
      e.data.logprobs = entries(ids);
    });
  }
  return { json, events };
}
