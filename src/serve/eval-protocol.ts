/**
 * What Eval Protocol's own `RemoteRolloutProcessor` (PyPI `eval-protocol`) needs besides `/init` and `/status`: it
 * reads a rollout's status, logs and traces from the Fireworks tracing proxy at its `model_base_url`, and gives the
 * remote server a model URL on that proxy (`<proxy>/rollout_id/…/row_id/…[/encoded_base_url/<base64 model URL>]`).
 * Pointed at `rollout serve`, this server is that proxy: the agent's model calls already pass through the model
 * gateway, whose records (`agent/llm-calls.jsonl`) become the traces, and the rollout's outcome its log entry.
 */
import path from 'node:path';

import { z } from 'zod';

import { lastLoopConversation, openAiMessage } from '../export/sources';
import { kindOf } from '../export/trials';
import type { TrialResult } from '../results/trial-result';
import type { RemoteRollouts, RolloutMetadata } from './remote-rollouts';
import type { Route } from './route';
import { METADATA_KEYS } from './tracing-url';

/** The paths the processor calls; `loopback_without_token` lets loopback clients call them without a token. */
export const EVAL_PROTOCOL_PATHS = new Set([
  '/init',
  '/status',
  '/v1/status',
  '/logs',
  '/v1/logs',
  '/v1/traces/pointwise',
]);

const TagsQuery = z.looseObject({
  tags: z.union([z.string(), z.array(z.string())]),
});

/** The rollout named by a `rollout_id:<id>` tag (the only tag the processor filters by). */
function rolloutIdOf(query: unknown): string | undefined {
  const { tags } = query as z.infer<typeof TagsQuery>;
  const tag = (Array.isArray(tags) ? tags : [tags]).find((t) => t.startsWith('rollout_id:'));
  return tag?.slice('rollout_id:'.length);
}

function tagsOf(metadata: RolloutMetadata): string[] {
  return METADATA_KEYS.flatMap((key) => (metadata[key] ? [`${key}:${metadata[key]}`] : []));
}

const ErrorSchema = z.object({ error: z.string() });

/** The tracing proxy's read endpoints, over the served rollouts. */
export function evalProtocolRoutes(rollouts: RemoteRollouts, statusRoute: Route): Route[] {
  const noRolloutTag = { error: 'query.tags: needs a rollout_id:<id> tag' };
  return [
    { ...statusRoute, path: '/v1/status', summary: `${statusRoute.summary} (the tracing proxy's path)` },
    ...['/logs', '/v1/logs'].map((logsPath): Route => ({
      method: 'GET',
      path: logsPath,
      summary: "A finished rollout's outcome as one log entry (status, reward in extras), by tag rollout_id:<id>",
      query: TagsQuery,
      responses: { 200: z.object({ entries: z.array(z.unknown()) }), 400: ErrorSchema },
      handler: async ({ query }, reply) => {
        const rolloutId = rolloutIdOf(query);
        if (!rolloutId) return reply.code(400).send(noRolloutTag);
        const status = await rollouts.status(rolloutId);
        if (!status?.terminated) return { entries: [] };
        const metadata = await rollouts.metadata(rolloutId);
        return {
          entries: [
            {
              timestamp: new Date().toISOString(),
              message: status.status.message,
              severity: status.status.code === 100 ? 'INFO' : 'ERROR',
              tags: tagsOf(metadata),
              status: { ...status.status, details: [] },
              extras: { reward: status.reward, rewards: status.rewards, error: status.error },
            },
          ],
        };
      },
    })),
    {
      method: 'GET',
      path: '/v1/traces/pointwise',
      summary: "A finished rollout's model conversation (from the gateway's records) as a trace, by rollout_id:<id>",
      query: TagsQuery,
      responses: { 200: z.object({ traces: z.array(z.unknown()) }), 400: ErrorSchema },
      handler: async ({ query }, reply) => {
        const rolloutId = rolloutIdOf(query);
        if (!rolloutId) return reply.code(400).send(noRolloutTag);
        const finished = await rollouts.result(rolloutId);
        if (!finished) return { traces: [] };
        const trace = await traceOf(finished.dir, finished.result, await rollouts.metadata(rolloutId));
        return { traces: trace ? [trace] : [] };
      },
    },
  ];
}

/**
 * The rollout's agent loop (its last model call and the reply) in the shape of a Langfuse trace as the proxy serves
 * it: `input.messages` and `input.tools`, `output` the reply, the rollout's metadata as tags.
 */
async function traceOf(dir: string, result: TrialResult, metadata: RolloutMetadata) {
  const conversation = await lastLoopConversation({ dir, kind: kindOf(path.basename(dir)), result });
  if (!conversation) return null;
  const messages = conversation.messages.map(openAiMessage);
  return {
    id: result.trial_name,
    name: result.task_name,
    timestamp: result.finished_at,
    tags: tagsOf(metadata),
    input: {
      messages: messages.slice(0, -1),
      ...(conversation.tools.length ? { tools: conversation.tools } : {}),
    },
    output: messages.at(-1),
    metadata: { model: conversation.model, rewards: result.rewards },
  };
}
