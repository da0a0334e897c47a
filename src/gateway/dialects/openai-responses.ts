/** OpenAI Responses: `POST …/responses` (codex). The `response.completed` event carries the whole response. */
import type { Dialect, Json, Message, ToolCall } from '../dialect';
import { arr, num, obj, parseArguments, str, textOf } from '../dialect';
import { jsonPayloads } from '../sse';
import { responseTokens, stripResponseTokens } from './responses-tokens';

const CALL_ITEMS = new Set(['function_call', 'custom_tool_call', 'local_shell_call']);
const OUTPUT_ITEMS = new Set(['function_call_output', 'custom_tool_call_output', 'local_shell_call_output']);

function toolCall(item: Json): ToolCall {
  const args =
    item.type === 'custom_tool_call'
      ? { input: str(item.input) }
      : item.type === 'local_shell_call'
        ? obj(item.action)
        : parseArguments(item.arguments);
  return { id: str(item.call_id || item.id), name: str(item.name) || str(item.type), arguments: args };
}

/** Messages from a list of items, consecutive assistant items (text, reasoning, calls) merged into one message. */
function itemsToMessages(items: Json[]): Message[] {
  const messages: Message[] = [];
  let assistant: Message | null = null;
  const current = (): Message => {
    if (!assistant) {
      assistant = { role: 'assistant', content: '' };
      messages.push(assistant);
    }
    return assistant;
  };
  for (const item of items) {
    const type = str(item.type) || 'message';
    if (type === 'message' && item.role === 'assistant') {
      const message = current();
      message.content = [message.content, textOf(item.content)].filter(Boolean).join('\n');
    } else if (type === 'reasoning') {
      const message = current();
      const summary = textOf(item.summary);
      if (summary) message.reasoning = [message.reasoning, summary].filter(Boolean).join('\n');
    } else if (CALL_ITEMS.has(type)) {
      const message = current();
      (message.tool_calls ??= []).push(toolCall(item));
    } else {
      assistant = null;
      if (OUTPUT_ITEMS.has(type)) {
        messages.push({ role: 'tool', tool_call_id: str(item.call_id), content: textOf(item.output) });
      } else if (type === 'message') {
        const role = item.role === 'system' || item.role === 'developer' ? 'system' : 'user';
        messages.push({ role, content: textOf(item.content) });
      }
    }
  }
  return messages;
}

export const openAiResponses: Dialect = {
  name: 'openai-responses',
  vendor: 'openai',
  match: (path) => (path.endsWith('/responses') ? 'generate' : null),
  stream: (body) => body.stream === true,
  model: (body) => str(body.model) || null,

  assemble(events) {
    const payloads = jsonPayloads(events);
    const done = payloads.find((e) => e.type === 'response.completed' || e.type === 'response.incomplete');
    if (done) return obj(done.response);
    // A stream that ended early: what was finished of it.
    const created = obj(payloads.find((e) => e.type === 'response.created')?.response);
    const output = payloads.filter((e) => e.type === 'response.output_item.done').map((e) => obj(e.item));
    return { ...created, output };
  },

  usage(response) {
    const usage = obj(obj(response).usage);
    if (usage.input_tokens === undefined && usage.output_tokens === undefined) return null;
    return {
      input_tokens: num(usage.input_tokens),
      output_tokens: num(usage.output_tokens),
      cached_tokens: num(obj(usage.input_tokens_details).cached_tokens),
    };
  },

  conversation(request) {
    const messages: Message[] = [];
    const instructions = str(request.instructions);
    if (instructions) messages.push({ role: 'system', content: instructions });
    if (typeof request.input === 'string') messages.push({ role: 'user', content: request.input });
    else messages.push(...itemsToMessages(arr(request.input)));
    return messages;
  },

  tools: (request) =>
    arr(request.tools)
      .filter((t) => t.type === 'function' || t.type === 'custom')
      .map((t) => ({
        type: 'function' as const,
        function: { name: str(t.name), description: str(t.description) || undefined, parameters: t.parameters },
      })),

  reply(response) {
    const output = arr(obj(response).output);
    if (!output.length) return null;
    const messages = itemsToMessages(output);
    return messages.find((m) => m.role === 'assistant') ?? null;
  },

  tokens: responseTokens,

  // vLLM (responses/protocol.py): `enable_response_messages` returns the prompt's and the completion's ids as
  // `input_messages` / `output_messages`; logprobs come with `include: ["message.output_text.logprobs"]`.
  requestTokens(body) {
    const added: string[] = [];
    if (body.enable_response_messages !== true) {
      body.enable_response_messages = true;
      added.push('enable_response_messages');
    }
    const include = Array.isArray(body.include) ? (body.include as unknown[]) : [];
    if (!include.includes(LOGPROBS_INCLUDE)) {
      body.include = [...include, LOGPROBS_INCLUDE];
      added.push(LOGPROBS_INCLUDE);
    }
    return added;
  },

  stripAdded: stripResponseTokens,
};

const LOGPROBS_INCLUDE = 'message.output_text.logprobs';
