/**
 * `--format rl`: one row per trial with its reward and, in order, every model call: the prompt (OpenAI-style
 * messages and tools), the completion, usage, latency, and the token ids and logprobs when the server returned them
 * (vLLM); a session's row has its steps (tool call, observation, exit code, timing). The row is written as its calls
 * are read; only the token view (`tokens`: exact segments with loss masks, ./token-view.ts) is held until the end.
 */
import path from 'node:path';

import { z } from 'zod';

import type { ExportFormat } from './format';
import { trialMetadata } from './format';
import { generationCalls, openAiMessage } from './sources';
import { TokenViewBuilder } from './token-view';
import { readInputJson } from './trials';

/** `<session>/session.json`, as far as the export reads it. */
const SessionStepsSchema = z.looseObject({ steps: z.array(z.looseObject({ tool_call: z.unknown() })) });

export const SESSION_RECORD_FILE = 'session.json';

export const rlRows: ExportFormat = async function* (trial) {
  const head = JSON.stringify({ ...trialMetadata(trial), usage: trial.result.usage ?? null });
  yield `${head.slice(0, -1)},"calls":[`;
  let n = 0;
  const view = new TokenViewBuilder();
  for await (const { record, dialect } of generationCalls(trial)) {
    const request = (record.request ?? {}) as Record<string, unknown>;
    const reply = record.response === null || record.error ? null : dialect.reply(record.response);
    const tokens = reply ? (dialect.tokens?.(record.response) ?? null) : null;
    const promptIds = tokens?.prompt_token_ids;
    view.add({
      seq: record.seq,
      ...(promptIds ? { prompt_token_ids: promptIds } : {}),
      ...(tokens?.token_ids ? { completion_token_ids: tokens.token_ids } : {}),
      ...(tokens?.logprobs ? { logprobs: tokens.logprobs } : {}),
      ...(record.policy_version !== undefined ? { policy_version: record.policy_version } : {}),
    });
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
      ...(record.policy_version !== undefined ? { policy_version: record.policy_version } : {}),
      ...(promptIds ? { prompt_token_ids: promptIds } : {}),
      ...(tokens?.token_ids ? { completion_token_ids: tokens.token_ids } : {}),
      ...(tokens?.logprobs ? { logprobs: tokens.logprobs } : {}),
      // Asked for (job.yaml `tokens: true`) and not returned: the token view splits after it, never glues over it.
      ...(record.tokens_missing ? { tokens_missing: true } : {}),
      error: record.error,
    };
    yield `${n++ ? ',' : ''}${JSON.stringify(call)}`;
  }
  const session =
    trial.kind === 'session'
      ? await readInputJson(path.join(trial.dir, SESSION_RECORD_FILE), SessionStepsSchema)
      : undefined;
  const tokenView = view.view();
  const tokensJson = tokenView.segments.length > 0 ? JSON.stringify(tokenView) : 'null';
  yield `],"steps":${JSON.stringify(session?.steps ?? [])},"tokens":${tokensJson}}\n`;
};
