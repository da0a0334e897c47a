/** Anthropic Messages: `POST /v1/messages` and `/v1/messages/count_tokens` (claude-code). */
import type { Dialect, Json, Message } from '../dialect';
import { arr, num, obj, str, textOf } from '../dialect';
import { jsonPayloads } from '../sse';

export const anthropic: Dialect = {
  name: 'anthropic',
  vendor: 'anthropic',
  match: (path) =>
    path.endsWith('/messages/count_tokens') ? 'count_tokens' : path.endsWith('/messages') ? 'generate' : null,
  stream: (body) => body.stream === true,
  model: (body) => str(body.model) || null,

  assemble(events) {
    let message: Json = {};
    const blocks: Json[] = [];
    const partialJson: string[] = [];
    for (const event of jsonPayloads(events)) {
      const index = num(event.index);
      switch (event.type) {
        case 'message_start':
          message = { ...obj(event.message) };
          break;
        case 'content_block_start':
          blocks[index] = { ...obj(event.content_block) };
          partialJson[index] = '';
          break;
        case 'content_block_delta': {
          const delta = obj(event.delta);
          const block = (blocks[index] ??= {});
          if (delta.type === 'text_delta') block.text = str(block.text) + str(delta.text);
          else if (delta.type === 'thinking_delta') block.thinking = str(block.thinking) + str(delta.thinking);
          else if (delta.type === 'input_json_delta')
            partialJson[index] = (partialJson[index] ?? '') + str(delta.partial_json);
          break;
        }
        case 'content_block_stop': {
          const block = blocks[index];
          if (block?.type === 'tool_use' && partialJson[index]) {
            try {
              block.input = JSON.parse(partialJson[index]) as unknown;
            } catch {
              block.input = { input: partialJson[index] };
            }
          }
          break;
        }
        case 'message_delta':
          // The final usage arrives here and overrides message_start's placeholder output count.
          message = { ...message, ...obj(event.delta), usage: { ...obj(message.usage), ...obj(event.usage) } };
          break;
      }
    }
    return { ...message, content: blocks.filter(Boolean) };
  },

  usage(response) {
    const usage = obj(obj(response).usage);
    if (usage.input_tokens === undefined && usage.output_tokens === undefined) return null;
    const cacheRead = num(usage.cache_read_input_tokens);
    return {
      input_tokens: num(usage.input_tokens) + cacheRead + num(usage.cache_creation_input_tokens),
      output_tokens: num(usage.output_tokens),
      cached_tokens: cacheRead,
    };
  },

  conversation(request) {
    const messages: Message[] = [];
    const system = textOf(request.system);
    if (system) messages.push({ role: 'system', content: system });
    for (const m of arr(request.messages)) {
      if (typeof m.content === 'string') {
        messages.push({ role: m.role === 'assistant' ? 'assistant' : 'user', content: m.content });
        continue;
      }
      const blocks = arr(m.content);
      if (m.role === 'assistant') {
        messages.push(assistantMessage(blocks));
        continue;
      }
      for (const block of blocks.filter((b) => b.type === 'tool_result')) {
        messages.push({ role: 'tool', tool_call_id: str(block.tool_use_id), content: textOf(block.content) });
      }
      const text = textOf(blocks.filter((b) => b.type === 'text'));
      if (text) messages.push({ role: 'user', content: text });
    }
    return messages;
  },

  tools: (request) =>
    arr(request.tools)
      .filter((t) => t.input_schema)
      .map((t) => ({
        type: 'function' as const,
        function: { name: str(t.name), description: str(t.description) || undefined, parameters: t.input_schema },
      })),

  reply(response) {
    const body = obj(response);
    return body.type === 'message' || Array.isArray(body.content) ? assistantMessage(arr(body.content)) : null;
  },
};

function assistantMessage(blocks: Json[]): Message {
  const message: Message = { role: 'assistant', content: textOf(blocks.filter((b) => b.type === 'text')) };
  const thinking = blocks.filter((b) => b.type === 'thinking').map((b) => str(b.thinking));
  if (thinking.length) message.reasoning = thinking.join('\n');
  const calls = blocks
    .filter((b) => b.type === 'tool_use')
    .map((b) => ({ id: str(b.id), name: str(b.name), arguments: obj(b.input) }));
  if (calls.length) message.tool_calls = calls;
  return message;
}
