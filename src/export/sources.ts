/**
 * What the export formats read of a trial folder: the gateway's `agent/llm-calls.jsonl` (any dialect, in the
 * neutral OpenAI-style shape the dialects give) and the ATIF `agent/trajectory.json` (gateway trials and sessions).
 */

import { z } from 'zod';

import { InputError } from '../contracts/errors';
import type { Message, ToolDefinition } from '../gateway/dialect';
import { dialectByName } from '../gateway/dialects';
import type { LlmCallRecord } from '../gateway/records';
import { readCallRecords } from '../gateway/records';
import type { AtifTrajectory } from '../trajectory/atif';
import { toolsKey } from '../trajectory/atif';
import type { ExportTrial } from './trials';
import { readInputJson } from './trials';
import { trialLayout } from '../contracts/paths';

/** A message as OpenAI's Chat Completions API takes it (tool call arguments as a JSON string). */
export interface OpenAiMessage {
  role: Message['role'];
  content: string;
  reasoning_content?: string;
  tool_calls?: { id: string; type: 'function'; function: { name: string; arguments: string } }[];
  tool_call_id?: string;
}

export function openAiMessage(message: Message): OpenAiMessage {
  return {
    role: message.role,
    content: message.content,
    ...(message.reasoning ? { reasoning_content: message.reasoning } : {}),
    ...(message.tool_calls?.length
      ? {
          tool_calls: message.tool_calls.map((call) => ({
            id: call.id,
            type: 'function' as const,
            function: { name: call.name, arguments: JSON.stringify(call.arguments) },
          })),
        }
      : {}),
    ...(message.tool_call_id ? { tool_call_id: message.tool_call_id } : {}),
  };
}

/** A conversation with the tools it was offered. */
export interface Conversation {
  messages: Message[];
  tools: ToolDefinition[];
  model: string | null;
}

/** The calls file's generation records, one at a time, with their dialect (records of unknown dialects skipped). */
export async function* generationCalls(trial: ExportTrial) {
  const file = trialLayout(trial.dir).llmCalls;
  const records = readCallRecords(file);
  for (;;) {
    let next: IteratorResult<LlmCallRecord>;
    try {
      next = await records.next();
    } catch (err) {
      throw new InputError([{ file, message: (err as Error).message.replace(`${file}: `, '') }]);
    }
    if (next.done) return;
    const record = next.value;
    const dialect = record.kind === 'generate' && record.dialect ? dialectByName(record.dialect) : null;
    if (dialect) yield { record, dialect };
  }
}

/**
 * The whole conversation of the trial's agent loop: the request of its last successful call plus that call's reply.
 * The loop is the tool set most calls offered (side calls, a title or a summary, offer others); the calls are read
 * once, keeping only the last call of each tool set.
 */
export async function lastLoopConversation(trial: ExportTrial): Promise<Conversation | null> {
  const tally = new Map<string, { count: number; last: LlmCallRecord }>();
  for await (const { record, dialect } of generationCalls(trial)) {
    if (record.error || record.response === null || !dialect.reply(record.response)) continue;
    const key = toolsKey(record);
    const entry = tally.get(key);
    tally.set(key, { count: (entry?.count ?? 0) + 1, last: record });
  }
  let best: { count: number; last: LlmCallRecord } | undefined;
  for (const [key, entry] of tally) if (key && entry.count > (best?.count ?? 0)) best = entry;
  best ??= tally.get('');
  if (!best) return null;
  const dialect = dialectByName(best.last.dialect!)!;
  const request = (best.last.request ?? {}) as Record<string, unknown>;
  const messages = dialect.conversation(request);
  const reply = dialect.reply(best.last.response)!;
  return {
    messages: [...messages, uniqueCallIds(reply, messages)],
    tools: dialect.tools(request),
    model: best.last.model,
  };
}

/** Gemini has no call ids: its synthetic ones restart in every reply, so a reply's must not repeat earlier ones. */
function uniqueCallIds(reply: Message, before: Message[]): Message {
  if (!reply.tool_calls) return reply;
  const used = new Set(before.flatMap((m) => (m.tool_calls ?? []).map((c) => c.id)));
  let n = used.size;
  const tool_calls = reply.tool_calls.map((call) => {
    if (call.id && !used.has(call.id)) return call;
    while (used.has(`call_${n}`)) n += 1;
    used.add(`call_${n}`);
    return { ...call, id: `call_${n}` };
  });
  return { ...reply, tool_calls };
}

const AtifSchema = z.looseObject({
  schema_version: z.string(),
  session_id: z.string(),
  agent: z.looseObject({
    name: z.string(),
    model_name: z.string().optional(),
    tool_definitions: z.array(z.unknown()).optional(),
  }),
  steps: z.array(
    z.looseObject({
      step_id: z.number(),
      source: z.enum(['system', 'user', 'agent']),
      message: z.unknown(),
      reasoning_content: z.string().optional(),
      tool_calls: z
        .array(z.looseObject({ tool_call_id: z.string(), function_name: z.string(), arguments: z.unknown() }))
        .optional(),
      observation: z
        .looseObject({
          results: z.array(z.looseObject({ source_call_id: z.string().nullish(), content: z.unknown() })),
        })
        .optional(),
      is_copied_context: z.boolean().optional(),
    })
  ),
});

export async function readTrajectory(trial: ExportTrial): Promise<AtifTrajectory | undefined> {
  return (await readInputJson(trialLayout(trial.dir).trajectory, AtifSchema)) as AtifTrajectory | undefined;
}

/** Text of ATIF content: a string, or parts with text (the first, as Harbor's exporter takes it), else JSON. */
export function atifText(content: unknown): string {
  if (content === null || content === undefined) return '';
  if (typeof content === 'string') return content;
  const first: unknown = Array.isArray(content) ? content[0] : undefined;
  if (first && typeof first === 'object' && 'text' in first && typeof first.text === 'string') return first.text;
  return JSON.stringify(content);
}

/** An ATIF trajectory as a conversation: agent steps are assistant turns, their observations tool messages. */
export function trajectoryConversation(trajectory: AtifTrajectory): Conversation {
  const messages: Message[] = [];
  for (const step of trajectory.steps) {
    const content = atifText(step.message);
    if (step.source !== 'agent') {
      messages.push({ role: step.source, content });
      continue;
    }
    messages.push({
      role: 'assistant',
      content,
      ...(step.reasoning_content ? { reasoning: step.reasoning_content } : {}),
      ...(step.tool_calls?.length
        ? {
            tool_calls: step.tool_calls.map((c) => ({
              id: c.tool_call_id,
              name: c.function_name,
              arguments: c.arguments,
            })),
          }
        : {}),
    });
    for (const result of step.observation?.results ?? []) {
      const text = atifText(result.content);
      messages.push(
        result.source_call_id
          ? { role: 'tool', tool_call_id: result.source_call_id, content: text }
          : { role: 'user', content: text }
      );
    }
  }
  return {
    messages,
    tools: (trajectory.agent.tool_definitions ?? []) as ToolDefinition[],
    model: trajectory.agent.model_name ?? null,
  };
}
