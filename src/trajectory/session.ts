/**
 * A session's steps as an ATIF trajectory (`<session>/agent/trajectory.json`), so sessions export like trials: the
 * instruction is the user step; each tool call is an agent step whose observation is the step's output. The client
 * calls its model itself, so steps carry no model metrics (`llm_call_count` unknown); exit code, timing and reward
 * are under each step's `extra`.
 */
import type { ToolDefinition } from '../gateway/dialect';
import type { SessionRecord } from '../contracts/session';
import type { AtifTrajectory } from './atif';
import { ATIF_VERSION } from './atif';

export function sessionTrajectory(record: SessionRecord, instruction: string, tools: ToolDefinition[]): AtifTrajectory {
  const steps: AtifTrajectory['steps'] = [
    { step_id: 1, timestamp: record.ready_at ?? record.started_at, source: 'user', message: instruction },
  ];
  for (const [i, step] of record.steps.entries()) {
    const id = `call_${i + 1}`;
    const { step: _n, ...info } = step.info;
    steps.push({
      step_id: steps.length + 1,
      timestamp: step.started_at,
      source: 'agent',
      message: '',
      tool_calls: [{ tool_call_id: id, function_name: step.tool_call.name, arguments: step.tool_call.arguments }],
      observation: { results: [{ source_call_id: id, content: step.observation }] },
      extra: {
        reward: step.reward,
        finished: step.finished,
        ...info,
        ...(step.policy_version !== undefined ? { policy_version: step.policy_version } : {}),
      },
    });
  }
  return {
    schema_version: ATIF_VERSION,
    session_id: record.workflow_id,
    agent: { name: 'session', version: 'unknown', ...(tools.length ? { tool_definitions: tools } : {}) },
    steps,
    final_metrics: { total_steps: steps.length },
    extra: { source: 'rollout session (its steps; the client called its model itself)' },
  };
}
