/**
 * Terminus's definition (its loop is ./terminus-loop.ts). Terminus: Rollout's own model-agnostic terminal agent. Its loop runs in the worker: it asks any OpenAI Chat
 * Completions server (a vendor, vLLM, the gateway) for the next shell commands, runs them in the container and sends
 * back their output, until the model declares the task complete twice in a row. Nothing is installed in the
 * container and no key enters it. Each call is logged to agent/terminus.jsonl with its usage and, when the server
 * returns them, token ids and logprobs (for RL).
 */
import { z } from 'zod';

import type { WorkerAgentDefinition } from './builtin';

export const terminusKwargs = z.strictObject({
  max_turns: z.number().int().positive().default(50),
  temperature: z.number().min(0).max(2).default(0),
  /** Per command; the agent's own time limit bounds it too. */
  command_timeout_sec: z.number().positive().default(180),
  /** Ask for logprobs and token ids (vLLM's `return_token_ids`) and keep them in terminus.jsonl. */
  collect_token_ids: z.boolean().default(false),
});
export type TerminusOptions = z.infer<typeof terminusKwargs>;

export const terminus: WorkerAgentDefinition = {
  kind: 'worker',
  name: 'terminus',
  description: "Rollout's model-agnostic terminal agent (loop in the worker, commands in the container)",
  version: '1.0.0',
  wireApi: 'openai-chat-completions',
  verified: true,
  kwargs: terminusKwargs,
};
