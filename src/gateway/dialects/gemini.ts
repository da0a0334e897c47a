/** Gemini: `POST /v1beta/models/<m>:generateContent`, `:streamGenerateContent`, `:countTokens` (gemini-cli). */
import type { Dialect, Json, Message } from '../dialect';
import { arr, num, obj, str } from '../dialect';
import { jsonPayloads } from '../sse';

const ROUTE = /\/models\/([^/:]+):(generateContent|streamGenerateContent|countTokens)$/;

/** Messages from Gemini contents; function responses become tool messages with synthetic ids (Gemini has none). */
function contentsToMessages(contents: Json[]): Message[] {
  const messages: Message[] = [];
  let callCount = 0;
  let answered = 0;
  for (const content of contents) {
    const parts = arr(content.parts);
    const text = parts
      .filter((p) => typeof p.text === 'string' && !p.thought)
      .map((p) => str(p.text))
      .join('');
    if (content.role === 'model') {
      const message: Message = { role: 'assistant', content: text };
      const thoughts = parts.filter((p) => p.thought).map((p) => str(p.text));
      if (thoughts.length) message.reasoning = thoughts.join('');
      const calls = parts
        .filter((p) => p.functionCall)
        .map((p) => {
          const call = obj(p.functionCall);
          return { id: str(call.id) || `call_${callCount++}`, name: str(call.name), arguments: obj(call.args) };
        });
      if (calls.length) message.tool_calls = calls;
      messages.push(message);
      continue;
    }
    for (const part of parts.filter((p) => p.functionResponse)) {
      const response = obj(part.functionResponse);
      messages.push({
        role: 'tool',
        tool_call_id: str(response.id) || `call_${answered++}`,
        content: JSON.stringify(response.response ?? {}),
      });
    }
    if (text) messages.push({ role: 'user', content: text });
  }
  return messages;
}

export const gemini: Dialect = {
  name: 'gemini',
  vendor: 'gemini',
  match(path) {
    const action = ROUTE.exec(path)?.[2];
    return action === undefined ? null : action === 'countTokens' ? 'count_tokens' : 'generate';
  },
  stream: (_body, path) => path.endsWith(':streamGenerateContent'),
  model: (_body, path) => {
    const model = ROUTE.exec(path)?.[1];
    return model ? decodeURIComponent(model) : null;
  },

  assemble(events) {
    const chunks = jsonPayloads(events);
    const parts: Json[] = [];
    let last: Json = {};
    for (const chunk of chunks) {
      last = chunk;
      const candidate = obj(arr(chunk.candidates)[0]);
      for (const part of arr(obj(candidate.content).parts)) {
        const previous = parts.at(-1);
        // Text streams in pieces: join consecutive text parts of the same kind.
        if (
          typeof part.text === 'string' &&
          previous &&
          typeof previous.text === 'string' &&
          !previous.thought === !part.thought
        ) {
          previous.text = str(previous.text) + part.text;
        } else parts.push({ ...part });
      }
    }
    const candidate = obj(arr(last.candidates)[0]);
    const usageMetadata = [...chunks].reverse().find((c) => c.usageMetadata)?.usageMetadata;
    return { ...last, candidates: [{ ...candidate, content: { role: 'model', parts } }], usageMetadata };
  },

  usage(response) {
    const usage = obj(obj(response).usageMetadata);
    if (usage.promptTokenCount === undefined && usage.candidatesTokenCount === undefined) return null;
    return {
      input_tokens: num(usage.promptTokenCount),
      output_tokens: num(usage.candidatesTokenCount) + num(usage.thoughtsTokenCount),
      cached_tokens: num(usage.cachedContentTokenCount),
    };
  },

  conversation(request) {
    const messages: Message[] = [];
    const system = arr(obj(request.systemInstruction ?? request.system_instruction).parts)
      .map((p) => str(p.text))
      .join('');
    if (system) messages.push({ role: 'system', content: system });
    messages.push(...contentsToMessages(arr(request.contents)));
    return messages;
  },

  tools: (request) =>
    arr(request.tools).flatMap((t) =>
      arr(t.functionDeclarations).map((fn) => ({
        type: 'function' as const,
        function: {
          name: str(fn.name),
          description: str(fn.description) || undefined,
          parameters: fn.parametersJsonSchema ?? fn.parameters,
        },
      }))
    ),

  reply(response) {
    const content = obj(obj(arr(obj(response).candidates)[0]).content);
    if (!content.parts) return null;
    return contentsToMessages([{ ...content, role: 'model' }])[0] ?? null;
  },
};
