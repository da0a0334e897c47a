/**
 * `<trial>/agent/trajectory.json` in Harbor's ATIF (v1.7), built from the gateway's records of the trial's model
 * calls, so every agent on the gateway has one whatever its native log format. Each model call of the main
 * conversation is an agent step with its own metrics; the user and tool messages that came before it (read from the
 * call's request, past what earlier calls already showed) are user steps and observations. Side calls (a title, a
 * next-speaker check: calls offering other tools than the main loop) count in the totals but are not steps.
 */
import type { Dialect, Message, Usage } from '../gateway/dialect';
import { dialectByName } from '../gateway/dialects';
import { callCost, priceOf } from '../budget/workflow/prices';
import type { LlmCallRecord } from '../gateway/records';

export const ATIF_VERSION = 'ATIF-v1.7';

export interface AtifToolCall {
  tool_call_id: string;
  function_name: string;
  arguments: Record<string, unknown>;
}

export interface AtifStep {
  step_id: number;
  timestamp?: string;
  source: 'system' | 'user' | 'agent';
  message: string;
  model_name?: string;
  reasoning_content?: string;
  tool_calls?: AtifToolCall[];
  observation?: { results: { source_call_id: string | null; content: string }[] };
  metrics?: {
    prompt_tokens: number;
    completion_tokens: number;
    cached_tokens: number;
    cost_usd?: number;
    completion_token_ids?: number[];
    logprobs?: number[];
  };
  is_copied_context?: boolean;
  llm_call_count?: number;
  extra?: Record<string, unknown>;
}

export interface AtifTrajectory {
  schema_version: typeof ATIF_VERSION;
  session_id: string;
  agent: { name: string; version: string; model_name?: string; tool_definitions?: unknown[] };
  steps: AtifStep[];
  /** Token totals are absent when the calls were not seen (a session's client calls its model itself). */
  final_metrics: {
    total_prompt_tokens?: number;
    total_completion_tokens?: number;
    total_cached_tokens?: number;
    total_cost_usd?: number | null;
    total_steps: number;
    extra?: { n_llm_calls: number; n_side_calls: number; n_failed_calls: number };
  };
  extra: { source: string };
}

export interface TrajectoryMeta {
  sessionId: string;
  agentName: string;
  agentVersion: string | null;
  model: string | null;
}

/** The names of the tools a call offered, sorted: calls of one agent loop offer the same set. */
export function toolsKey(call: LlmCallRecord): string {
  const dialect = call.dialect ? dialectByName(call.dialect) : null;
  const body =
    call.request !== null && typeof call.request === 'object' ? (call.request as Record<string, unknown>) : {};
  return (dialect?.tools(body) ?? [])
    .map((t) => t.function.name)
    .sort()
    .join(',');
}

/** The tool set of the main loop: the one most calls offer (ties: the first seen); '' when no call has tools. */
function mainToolsKey(calls: LlmCallRecord[]): string {
  const counts = new Map<string, number>();
  for (const call of calls) {
    const key = toolsKey(call);
    if (key) counts.set(key, (counts.get(key) ?? 0) + 1);
  }
  let best = '';
  for (const [key, n] of counts) if (n > (counts.get(best) ?? 0)) best = key;
  return best;
}

/** The trajectory of a trial's calls, or null when there was no successful model call to make a step of. */
export function buildTrajectory(records: LlmCallRecord[], meta: TrajectoryMeta): AtifTrajectory | null {
  const generations = records.filter((r) => r.kind === 'generate' && r.dialect);
  const mainKey = mainToolsKey(generations);
  const steps: AtifStep[] = [];
  const totals: Usage = { input_tokens: 0, output_tokens: 0, cached_tokens: 0 };
  let cost: number | null = 0;
  let sideCalls = 0;
  let failed = 0;
  let seen = 0;
  let lastAgent: AtifStep | null = null;
  let tools: unknown[] | undefined;

  const push = (step: Omit<AtifStep, 'step_id'>): AtifStep => {
    const full = { step_id: steps.length + 1, ...step };
    steps.push(full);
    return full;
  };
  const observe = (message: Message, copied: boolean) => {
    const calls = lastAgent?.tool_calls ?? [];
    const results = (lastAgent && (lastAgent.observation ??= { results: [] }).results) || null;
    if (!copied && results && calls.length > results.length) {
      // Gemini has no call ids: fall back to the order of calls.
      const byId = calls.find((c) => c.tool_call_id === message.tool_call_id);
      results.push({ source_call_id: (byId ?? calls[results.length]!).tool_call_id, content: message.content });
    } else {
      push({ source: 'user', message: message.content, ...(copied ? { is_copied_context: true } : {}) });
    }
  };

  for (const call of generations) {
    const dialect = dialectByName(call.dialect!)!;
    if (call.usage) {
      totals.input_tokens += call.usage.input_tokens;
      totals.output_tokens += call.usage.output_tokens;
      totals.cached_tokens += call.usage.cached_tokens;
      const price = call.model ? priceOf(call.model) : null;
      cost = cost === null || !price ? null : cost + callCost(price, call.usage);
    }
    const reply = call.response === null || call.error ? null : dialect.reply(call.response);
    if (!reply) {
      failed += 1;
      continue;
    }
    if (mainKey && toolsKey(call) !== mainKey) {
      sideCalls += 1;
      continue;
    }
    const request = (call.request ?? {}) as Record<string, unknown>;
    tools = dialect.tools(request);
    const conversation = dialect.conversation(request);
    // A request that does not extend what earlier calls showed was rewritten (compaction): its messages are copies.
    const copied = conversation.length < seen;
    for (const message of conversation.slice(copied ? 0 : seen)) {
      if (message.role === 'tool') observe(message, copied);
      else if (message.role === 'assistant') {
        if (!copied)
          lastAgent = push({ source: 'agent', message: message.content, llm_call_count: 0, ...toolCalls(message) });
      } else {
        push({ source: message.role, message: message.content, ...(copied ? { is_copied_context: true } : {}) });
      }
    }
    lastAgent = push(replyStep(call, reply, dialect));
    seen = conversation.length + 1;
  }
  if (steps.length === 0) return null;
  const counts = { n_llm_calls: generations.length, n_side_calls: sideCalls, n_failed_calls: failed };
  return trajectory(meta, steps, tools, totals, cost, counts);
}

/** The agent's step for one generate call: its reply, with the call's tokens, cost and (when kept) token ids. */
function replyStep(call: LlmCallRecord, reply: Message, dialect: Dialect): Omit<AtifStep, 'step_id'> {
  const usage = call.usage ?? { input_tokens: 0, output_tokens: 0, cached_tokens: 0 };
  const price = call.model ? priceOf(call.model) : null;
  const tokens = dialect.tokens?.(call.response) ?? null;
  return {
    timestamp: call.finished_at,
    source: 'agent',
    message: reply.content,
    ...(call.model ? { model_name: call.model } : {}),
    ...(reply.reasoning ? { reasoning_content: reply.reasoning } : {}),
    ...toolCalls(reply),
    metrics: {
      prompt_tokens: usage.input_tokens,
      completion_tokens: usage.output_tokens,
      cached_tokens: usage.cached_tokens,
      ...(price ? { cost_usd: callCost(price, usage) } : {}),
      ...(tokens?.token_ids ? { completion_token_ids: tokens.token_ids } : {}),
      ...(tokens?.logprobs ? { logprobs: tokens.logprobs } : {}),
    },
    llm_call_count: 1,
  };
}

function trajectory(
  meta: TrajectoryMeta,
  steps: AtifStep[],
  tools: unknown[] | undefined,
  totals: Usage,
  cost: number | null,
  counts: AtifTrajectory['final_metrics']['extra']
): AtifTrajectory {
  return {
    schema_version: ATIF_VERSION,
    session_id: meta.sessionId,
    agent: {
      name: meta.agentName,
      version: meta.agentVersion ?? 'unknown',
      ...(meta.model ? { model_name: meta.model } : {}),
      ...(tools?.length ? { tool_definitions: tools } : {}),
    },
    steps,
    final_metrics: {
      total_prompt_tokens: totals.input_tokens,
      total_completion_tokens: totals.output_tokens,
      total_cached_tokens: totals.cached_tokens,
      total_cost_usd: cost,
      total_steps: steps.length,
      extra: counts,
    },
    extra: { source: 'rollout model gateway (agent/llm-calls.jsonl)' },
  };
}

function toolCalls(message: Message): { tool_calls?: AtifToolCall[] } {
  if (!message.tool_calls?.length) return {};
  return {
    tool_calls: message.tool_calls.map((c) => ({ tool_call_id: c.id, function_name: c.name, arguments: c.arguments })),
  };
}
