/**
 * `--format rl`: one row per trial with its reward and, in order, every model call: the prompt (OpenAI-style
 * messages and tools), the completion, usage, latency, and the token ids and logprobs when the server returned them
 * (vLLM); a session's row has its steps (tool call, observation, exit code, timing). The row is written as its calls
 * are read, so a trial of thousands of calls takes no more memory than one call.
 */
import path from 'node:path';

import { z } from 'zod';

import type { ExportFormat } from './format';
import { trialMetadata } from './format';
import { generationCalls, openAiMessage } from './sources';
import { readInputJson } from './trials';

/** `<session>/session.json`, as far as the export reads it. */
const SessionStepsSchema = z.looseObject({ steps: z.array(z.looseObject({ tool_call: z.unknown() })) });

export const SESSION_RECORD_FILE = 'session.json';

export const rlRows: ExportFormat = async function* (trial) {
  const head = JSON.stringify({ ...trialMetadata(trial), usage: trial.result.usage ?? null });
  yield `${head.slice(0, -1)},"calls":[`;
  let n = 0;
  for await (const { record, dialect } of generationCalls(trial)) {
    const request = (record.request ?? {}) as Record<string, unknown>;
    const reply = record.response === null || record.error ? null : dialect.reply(record.response);
    const tokens = reply ? (dialect.tokens?.(record.response) ?? null) : null;
    const promptIds = (record.response as { prompt_token_ids?: unknown } | null)?.prompt_token_ids;
    const call = {
      seq: record.seq,
      started_at: record.started_at,
      latency_ms: record.latency_ms,
      dialect: record.dialect,
      model: record.model,
      status: record.status,
      messages: dialect.conversation(request).map(openAiMessage),
      tools: dialect.tools(request),
      completion: reply ? openAiMessage(reply) : null,
      usage: record.usage,
      ...(Array.isArray(promptIds) ? { prompt_token_ids: promptIds as number[] } : {}),
      ...(tokens?.token_ids ? { completion_token_ids: tokens.token_ids } : {}),
      ...(tokens?.logprobs ? { logprobs: tokens.logprobs } : {}),
      error: record.error,
    };
    yield `${n++ ? ',' : ''}${JSON.stringify(call)}`;
  }
  const session =
    trial.kind === 'session'
      ? await readInputJson(path.join(trial.dir, SESSION_RECORD_FILE), SessionStepsSchema)
      : undefined;
  yield `],"steps":${JSON.stringify(session?.steps ?? [])}}\n`;
};
