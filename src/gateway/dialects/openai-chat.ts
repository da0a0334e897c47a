/** OpenAI Chat Completions: `POST …/chat/completions`, the dialect of most agents and of vLLM. */
import type { Dialect, Json, Message, ToolCall } from '../dialect';
import { arr, idList, num, obj, parseArguments, setParams, str, textOf } from '../dialect';
import { jsonPayloads } from '../sse';

function toolCalls(value: unknown): ToolCall[] {
  return arr(value).map((call) => {
    const fn = obj(call.function);
    return { id: str(call.id), name: str(fn.name), arguments: parseArguments(fn.arguments) };
  });
}

/** What the gateway adds to every stream the agent did not ask usage of (budgets and limits need it). */
export const STREAM_USAGE = 'stream_options.include_usage';

export const openAiChat: Dialect = {
  name: 'openai-chat',
  vendor: 'openai',
  match: (path) => (path.endsWith('/chat/completions') ? 'generate' : null),
  stream: (body) => body.stream === true,
  model: (body) => str(body.model) || null,

  assemble(events) {
    let base: Json = {};
    let content = '';
    let reasoning = '';
    let finish: unknown = null;
    let usage: unknown = null;
    const calls: { id: string; type: string; function: { name: string; arguments: string } }[] = [];
    const logprobs: unknown[] = [];
    // vLLM with return_token_ids: the prompt's ids in the first chunk, each chunk's delta ids on its choice.
    let promptIds: unknown = undefined;
    let tokenIds: number[] | null = null;
    for (const chunk of jsonPayloads(events)) {
      if (!base.id) base = { id: chunk.id, created: chunk.created, model: chunk.model };
      if (chunk.usage) usage = chunk.usage;
      if (Array.isArray(chunk.prompt_token_ids) && promptIds === undefined) promptIds = chunk.prompt_token_ids;
      for (const choice of arr(chunk.choices)) {
        if (Array.isArray(choice.token_ids)) (tokenIds ??= []).push(...(choice.token_ids as number[]));
        const delta = obj(choice.delta);
        content += str(delta.content);
        reasoning += str(delta.reasoning_content ?? delta.reasoning);
        if (choice.finish_reason) finish = choice.finish_reason;
        logprobs.push(...arr(obj(choice.logprobs).content));
        for (const part of arr(delta.tool_calls)) {
          const index = num(part.index);
          const call = (calls[index] ??= { id: '', type: 'function', function: { name: '', arguments: '' } });
          const fn = obj(part.function);
          if (part.id) call.id = str(part.id);
          call.function.name += str(fn.name);
          call.function.arguments += str(fn.arguments);
        }
      }
    }
    const message: Json = { role: 'assistant', content: content || null };
    if (reasoning) message.reasoning_content = reasoning;
    if (calls.length) message.tool_calls = calls.filter(Boolean);
    const choice: Json = { index: 0, message, finish_reason: finish };
    if (logprobs.length) choice.logprobs = { content: logprobs };
    if (tokenIds) choice.token_ids = tokenIds;
    return {
      ...base,
      object: 'chat.completion',
      choices: [choice],
      usage,
      ...(promptIds !== undefined ? { prompt_token_ids: promptIds } : {}),
    };
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

  conversation(request) {
    return arr(request.messages).map((m): Message => {
      const role = str(m.role);
      const message: Message = {
        role: role === 'developer' ? 'system' : (role as Message['role']),
        content: textOf(m.content),
      };
      if (m.tool_calls) message.tool_calls = toolCalls(m.tool_calls);
      if (m.tool_call_id) message.tool_call_id = str(m.tool_call_id);
      return message;
    });
  },

  tools: (request) =>
    arr(request.tools)
      .filter((t) => t.function)
      .map((t) => ({ type: 'function' as const, function: obj(t.function) as { name: string } })),

  reply(response) {
    const message = obj(arr(obj(response).choices)[0]?.message);
    if (!message.role) return null;
    const reply: Message = { role: 'assistant', content: textOf(message.content) };
    const reasoning = str(message.reasoning_content ?? message.reasoning);
    if (reasoning) reply.reasoning = reasoning;
    const calls = toolCalls(message.tool_calls);
    if (calls.length) reply.tool_calls = calls;
    return reply;
  },

  tokens(response) {
    const choice = arr(obj(response).choices)[0] ?? {};
    const logprobs = arr(obj(choice.logprobs).content).map((entry) => num(entry.logprob));
    const ids = idList(choice.token_ids);
    // vLLM puts the prompt's ids on the response, SGLang on the choice.
    const promptIds = idList(obj(response).prompt_token_ids) ?? idList(choice.prompt_token_ids);
    if (!logprobs.length && !ids && !promptIds) return null;
    return {
      ...(promptIds ? { prompt_token_ids: promptIds } : {}),
      ...(ids ? { token_ids: ids } : {}),
      ...(logprobs.length ? { logprobs } : {}),
    };
  },

  // vLLM (chat_completion/protocol.py) and SGLang (entrypoints/openai/protocol.py) both take these.
  requestTokens: (body) => setParams(body, { return_token_ids: true, logprobs: true }),

  askUsage: askStreamUsage,

  stripAdded(payload, added) {
    const ids = added.includes('return_token_ids');
    const logprobs = added.includes('logprobs');
    const out: Json = { ...payload };
    if (added.includes(STREAM_USAGE)) {
      // The usage chunk (no choices) the agent did not ask for is dropped; the others lose their `usage: null`.
      if (Array.isArray(out.choices) && out.choices.length === 0) return null;
      delete out.usage;
    }
    if (ids) delete out.prompt_token_ids;
    if (Array.isArray(out.choices)) {
      out.choices = arr(out.choices).map((choice) => {
        const copy: Json = { ...choice };
        if (ids) {
          delete copy.token_ids;
          delete copy.prompt_token_ids;
        }
        if (logprobs && 'logprobs' in copy) copy.logprobs = null;
        return copy;
      });
    }
    return out;
  },
};

/** OpenAI-style streams (Chat, Completions) carry usage only when asked: the request asking for it, or null. */
export function askStreamUsage(body: Json): { body: Json; added: string } | null {
  const options = obj(body.stream_options);
  if (body.stream !== true || options.include_usage === true) return null;
  return { body: { ...body, stream_options: { ...options, include_usage: true } }, added: STREAM_USAGE };
}
