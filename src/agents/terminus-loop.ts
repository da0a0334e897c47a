/** Terminus's loop (its definition is ./terminus.ts): runs in the worker, one model call and command batch a turn. */
import { appendFile, mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';

import { z } from 'zod';

import type { ExecResult } from '../contracts/environment';
import type { AgentConfig } from '../contracts/job-config';
import type { Agent, AgentRun } from '../contracts/agent';
import type { TerminusOptions } from './terminus';
import { terminusKwargs } from './terminus';

const OUTPUT_LIMIT = 10_000;
const SYSTEM_PROMPT = `You solve tasks in a Linux container by running shell commands.
Reply with exactly one JSON object and nothing else:
{"analysis": "what you see", "plan": "what you do next", "commands": [{"keystrokes": "a bash command"}], "task_complete": false}
Each command runs in a new bash shell in the task's working directory (cd and exported variables do not carry over);
its exit code and output come back in the next message. When the task is done, reply with "task_complete": true and
no commands; you will be asked to confirm.`;

interface ChatMessage {
  role: 'system' | 'user' | 'assistant';
  content: string;
}

interface ChatResponse {
  choices?: { message?: { content?: string | null }; token_ids?: number[]; logprobs?: unknown }[];
  usage?: Record<string, unknown>;
  prompt_token_ids?: number[];
}

interface Reply {
  commands: string[];
  taskComplete: boolean;
}

/** A model API answered with an error status: the run ends with the status in terminus.txt. */
class ModelApiError extends Error {}

export function terminusAgent(config: AgentConfig): Agent {
  const options = terminusKwargs.parse(config.kwargs ?? {});
  return {
    name: config.name,
    install: () => Promise.resolve(null),
    execute: (run) => runLoop(run, config.model, options),
  };
}

async function runLoop(run: AgentRun, model: string | undefined, options: TerminusOptions): Promise<ExecResult> {
  const deadline = Date.now() + run.timeoutMs;
  await mkdir(run.agentLogsDir, { recursive: true });
  const transcript = path.join(run.agentLogsDir, 'terminus.txt');
  const calls = path.join(run.agentLogsDir, 'terminus.jsonl');
  await writeFile(transcript, '');
  const note = (text: string) => appendFile(transcript, `${text}\n`);
  const messages: ChatMessage[] = [
    { role: 'system', content: SYSTEM_PROMPT },
    { role: 'user', content: run.task.instruction },
  ];
  let pendingCompletion = false;
  try {
    for (let turn = 1; turn <= options.max_turns; turn++) {
      if (Date.now() >= deadline) return outcome(null, true);
      const content = await complete(run, model, messages, options, deadline, calls, turn);
      messages.push({ role: 'assistant', content });
      await note(`--- turn ${turn}: model\n${content}`);
      const reply = parseReply(content);
      if (typeof reply === 'string') {
        messages.push({
          role: 'user',
          content: `Your reply was not the JSON object asked for (${reply}). Reply again.`,
        });
        continue;
      }
      if (reply.taskComplete && reply.commands.length === 0) {
        if (pendingCompletion) return outcome(0, false);
        pendingCompletion = true;
        messages.push({
          role: 'user',
          content: 'Are you sure the task is complete? If so, reply again with "task_complete": true.',
        });
        continue;
      }
      pendingCompletion = false;
      const outputs: string[] = [];
      for (const command of reply.commands) {
        const remainingMs = deadline - Date.now();
        if (remainingMs <= 0) return outcome(null, true);
        const result = await run.environment.exec(run.handle, {
          command,
          user: run.user,
          timeoutMs: Math.min(options.command_timeout_sec * 1000, remainingMs),
          signal: run.signal,
        });
        const status = result.timedOut ? 'timed out (its processes were killed)' : `exit ${result.exitCode}`;
        outputs.push(`$ ${command}\n[${status}]\n${clip(result.stdout + result.stderr)}`);
      }
      const observation = outputs.join('\n\n') || 'No commands were run.';
      await note(`--- turn ${turn}: output\n${observation}`);
      messages.push({ role: 'user', content: observation });
    }
    await note(`stopped: max_turns (${options.max_turns}) reached`);
    return outcome(1, false);
  } catch (err) {
    if (!(err instanceof ModelApiError)) throw err;
    await note(err.message);
    return { exitCode: 1, stdout: '', stderr: err.message, timedOut: false };
  }
}

function outcome(exitCode: number | null, timedOut: boolean): ExecResult {
  return { exitCode, stdout: '', stderr: '', timedOut };
}

async function complete(
  run: AgentRun,
  model: string | undefined,
  messages: ChatMessage[],
  options: TerminusOptions,
  deadline: number,
  callsFile: string,
  turn: number
): Promise<string> {
  const base = (run.env.OPENAI_BASE_URL ?? 'https://api.openai.com/v1').replace(/\/+$/, '');
  const body = {
    model: model ?? 'default',
    messages,
    temperature: options.temperature,
    ...(options.collect_token_ids ? { logprobs: true, return_token_ids: true } : {}),
  };
  const started = Date.now();
  const response = await fetch(`${base}/chat/completions`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      ...(run.env.OPENAI_API_KEY ? { authorization: `Bearer ${run.env.OPENAI_API_KEY}` } : {}),
    },
    body: JSON.stringify(body),
    signal: AbortSignal.any([run.signal, AbortSignal.timeout(Math.max(1, deadline - Date.now()))]),
  });
  const text = await response.text();
  if (!response.ok) throw new ModelApiError(`model API ${base} answered ${response.status}: ${text.slice(0, 500)}`);
  const parsed = JSON.parse(text) as ChatResponse;
  const choice = parsed.choices?.[0];
  const record = {
    turn,
    latency_ms: Date.now() - started,
    usage: parsed.usage ?? null,
    content: choice?.message?.content ?? '',
    ...(options.collect_token_ids
      ? {
          prompt_token_ids: parsed.prompt_token_ids ?? null,
          completion_token_ids: choice?.token_ids ?? null,
          logprobs: choice?.logprobs ?? null,
        }
      : {}),
  };
  await appendFile(callsFile, `${JSON.stringify(record)}\n`);
  return record.content;
}

/** The model's JSON reply (code fences and text around it tolerated), or why it is not one. */
function parseReply(content: string): Reply | string {
  const start = content.indexOf('{');
  const end = content.lastIndexOf('}');
  if (start < 0 || end < start) return 'no JSON object';
  let value: unknown;
  try {
    value = JSON.parse(content.slice(start, end + 1));
  } catch (err) {
    return (err as Error).message;
  }
  const reply = ReplySchema.safeParse(value);
  if (!reply.success) return reply.error.issues.map((issue) => `${issue.path.join('.')}: ${issue.message}`).join('; ');
  return {
    commands: reply.data.commands.map((c) => c.keystrokes.replace(/\n+$/, '')).filter((c) => c.trim() !== ''),
    taskComplete: reply.data.task_complete,
  };
}

const ReplySchema = z.object({
  commands: z.array(z.object({ keystrokes: z.string() })).default([]),
  task_complete: z.boolean().default(false),
});

function clip(text: string): string {
  return text.length <= OUTPUT_LIMIT
    ? text
    : `[…${text.length - OUTPUT_LIMIT} characters cut…]\n${text.slice(-OUTPUT_LIMIT)}`;
}
