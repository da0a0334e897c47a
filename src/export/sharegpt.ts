/**
 * `--format sharegpt`: the rows of Harbor's `traces export --sharegpt`, from the ATIF trajectory. One row per agent
 * step (an episode: the conversation up to and including that step; copied context starts none), or with
 * `--episodes last` only the last. Rendering as Harbor's: system steps are user turns (the first carries the tool
 * definitions in `<tools>`), agent turns are `<think>…</think>`, the message and one `<tool_call>` per call, and the
 * observations of earlier agent steps are user turns; `conversations_sharegpt` maps them to {from, value}.
 */
import type { AtifStep } from '../trajectory/atif';
import type { ExportFormat } from './format';
import { trialMetadata } from './format';
import { atifText, readTrajectory } from './sources';

interface Turn {
  role: 'user' | 'assistant';
  content: string;
}

const SHAREGPT_FROM = { user: 'human', assistant: 'gpt', system: 'system' } as const;

function agentTurn(step: AtifStep): string {
  const parts: string[] = [];
  if (step.reasoning_content) parts.push(`<think>${step.reasoning_content}</think>`);
  let message = atifText(step.message);
  // A model served without its opening think tag (vLLM returns only generated tokens): restore it, as Harbor does.
  if (message.includes('</think>') && !message.includes('<think>')) message = `<think>${message}`;
  if (message) parts.push(message);
  for (const call of step.tool_calls ?? []) {
    parts.push(`<tool_call>\n${JSON.stringify({ name: call.function_name, arguments: call.arguments })}\n</tool_call>`);
  }
  return parts.join('\n');
}

/** Python's str(float(x)), as Harbor writes a reward bucket. */
function rewardBucket(reward: number): string {
  return Number.isInteger(reward) ? reward.toFixed(1) : String(reward);
}

export const sharegptRows: ExportFormat = async function* (trial, { episodes }) {
  const trajectory = await readTrajectory(trial);
  if (!trajectory) return;
  const meta = trialMetadata(trial);
  const tools = trajectory.agent.tool_definitions;
  const row = (turns: Turn[], episode: number) => ({
    conversations: turns,
    conversations_sharegpt: turns.map((t) => ({ from: SHAREGPT_FROM[t.role], value: t.content })),
    agent: trajectory.agent.name,
    model: trajectory.agent.model_name ?? trial.result.agent?.model ?? 'unknown-model',
    model_provider: 'unknown-provider',
    date: trial.result.started_at,
    task: meta.task_name,
    episode: `episode-${episode}`,
    run_id: meta.job_name,
    trial_name: meta.trial_name,
    result: meta.error ? meta.error.type : meta.reward === null ? null : rewardBucket(meta.reward),
    ...(tools?.length ? { tool_definitions: tools } : {}),
  });

  const turns: Turn[] = [];
  let toolsShown = false;
  let episode = 0;
  let last: ReturnType<typeof row> | null = null;
  for (const step of trajectory.steps) {
    if (step.source === 'system') {
      let content = atifText(step.message);
      if (tools?.length && !toolsShown) {
        content = `<tools>\n${JSON.stringify(tools, null, 2)}\n</tools>\n\n${content}`;
        toolsShown = true;
      }
      turns.push({ role: 'user', content });
    } else if (step.source === 'user') {
      turns.push({ role: 'user', content: atifText(step.message) });
    } else {
      turns.push({ role: 'assistant', content: agentTurn(step) });
      if (!step.is_copied_context) {
        last = row([...turns], episode++);
        if (episodes === 'all') yield `${JSON.stringify(last)}\n`;
      }
      const observed = (step.observation?.results ?? []).map((r) => atifText(r.content));
      if (observed.length) turns.push({ role: 'user', content: observed.join('\n') });
    }
  }
  if (episodes === 'last' && last) yield `${JSON.stringify(last)}\n`;
};
