/**
 * OpenAI Completions (the legacy text route): `POST …/completions`, served by vLLM and SGLang, where the prompt may
 * be text or token ids (vLLM `vllm/entrypoints/openai/completion/protocol.py`, SGLang
 * `python/sglang/srt/entrypoints/openai/protocol.py`: `CompletionRequest.prompt`, `return_token_ids`, `logprobs`).
 */
import type { Dialect, Json, Message } from '../dialect';
import { arr, idList, num, obj, str } from '../dialect';
import { jsonPayloads } from '../sse';
import { STREAM_USAGE, askStreamUsage } from './openai-chat';

/** A prompt as conversation text: the text itself, or how many token ids it was. */
function promptText(prompt: unknown): string {
  if (typeof prompt === 'string') return prompt;
  const ids = idList(prompt);
  if (ids) return `[${ids.length} token ids]`;
  return Array.isArray(prompt) ? prompt.map((part) => promptText(part)).join('\n') : '';
}

export const openAiCompletions: Dialect = {
  name: 'openai-completions',
  vendor: 'openai',
  match: (path) => (/(^|\/)completions$/.test(path) && !path.endsWith('/chat/completions') ? 'generate' : null),
  stream: (body) => body.stream === true,
  model: (body) => str(body.model) || null,

  assemble(events) {
    let base: Json = {};
    let text = '';
    let finish: unknown = null;
    let usage: unknown = null;
    let promptIds: number[] | undefined;
    let tokenIds: number[] | null = null;
    let tokenLogprobs: unknown[] | null = null;
    const tokens: unknown[] = [];
    for (const chunk of jsonPayloads(events)) {
      if (!base.id) base = { id: chunk.id, created: chunk.created, model: chunk.model };
      if (chunk.usage) usage = chunk.usage;
      for (const choice of arr(chunk.choices)) {
        text += str(choice.text);
        if (choice.finish_reason) finish = choice.finish_reason;
        // The prompt's ids come in the first chunk's choice; each chunk carries its delta ids and logprobs.
        promptIds ??= idList(choice.prompt_token_ids);
        const ids = idList(choice.token_ids);
        if (ids) (tokenIds ??= []).push(...ids);
        const logprobs = obj(choice.logprobs);
        if (Array.isArray(logprobs.token_logprobs))
          (tokenLogprobs ??= []).push(...(logprobs.token_logprobs as unknown[]));
        if (Array.isArray(logprobs.tokens)) tokens.push(...(logprobs.tokens as unknown[]));
      }
    }
    const choice: Json = { index: 0, text, finish_reason: finish };
    if (tokenLogprobs) choice.logprobs = { tokens, token_logprobs: tokenLogprobs };
    if (promptIds) choice.prompt_token_ids = promptIds;
    if (tokenIds) choice.token_ids = tokenIds;
    return { ...base, object: 'text_completion', choices: [choice], usage };
  },

  usage(response) {
    const usage = obj(obj(response).usage);
    if (usage.prompt_tokens === undefined && usage.completion_tokens === undefined) return null;
    return {
      input_tokens: num(usage.prompt_tokens),
      output_tokens: num(usage.completion_tokens),
      cached_tokens: num(obj(usage.prompt_tokens_details).cached_tokens),
    };
  },

  conversation: (request): Message[] => [{ role: 'user', content: promptText(request.prompt) }],
  tools: () => [],

  reply(response) {
    const choice = arr(obj(response).choices)[0];
    return choice ? { role: 'assistant', content: str(choice.text) } : null;
  },

  tokens(response) {
    const choice = arr(obj(response).choices)[0] ?? {};
    const promptIds = idList(choice.prompt_token_ids);
    const ids = idList(choice.token_ids);
    const listed = obj(choice.logprobs).token_logprobs;
    const logprobs = Array.isArray(listed) ? listed.map(num) : [];
    if (!promptIds && !ids && !logprobs.length) return null;
    return {
      ...(promptIds ? { prompt_token_ids: promptIds } : {}),
      ...(ids ? { token_ids: ids } : {}),
      ...(logprobs.length ? { logprobs } : {}),
    };
  },

  requestTokens(body) {
    const added: string[] = [];
    if (body.return_token_ids !== true) {
      body.return_token_ids = true;
      added.push('return_token_ids');
    }
    // `logprobs` is a count of alternatives here: 0 gives the sampled token's own; an agent's count is kept.
    if (typeof body.logprobs !== 'number') {
      body.logprobs = 0;
      added.push('logprobs');
    }
    return added;
  },

  askUsage: askStreamUsage,

  stripAdded(payload, added) {
    const ids = added.includes('return_token_ids');
    const logprobs = added.includes('logprobs');
    if (added.includes(STREAM_USAGE)) {
      // The usage chunk (no choices) the agent did not ask for is dropped; the others lose their `usage: null`.
      if (Array.isArray(payload.choices) && payload.choices.length === 0) return null;
      payload = { ...payload };
      delete payload.usage;
    }
    if (!Array.isArray(payload.choices)) return payload;
    const choices = arr(payload.choices).map((choice) => {
      const copy: Json = { ...choice };
      if (ids) {
        delete copy.token_ids;
        delete copy.prompt_token_ids;
      }
      if (logprobs && 'logprobs' in copy) copy.logprobs = null;
      return copy;
    });
    return { ...payload, choices };
  },
};
