/**
 * Scripted model server: a stand-in for LLM vendor APIs (which cannot be reached here), speaking the four wire
 * dialects Rollout's agents use, JSON and SSE. Tests point agents (or the model gateway) at it and assert on what it
 * recorded.
 *
 * ## API
 * ```ts
 * const server = await startScriptedModelServer({ host: '127.0.0.1', port: 0 });  // host '0.0.0.0' for containers
 * const session = server.session('trial-1', {
 *   turns: [{ shell: "printf 'Hello' > hello.txt" }, { write: { path: 'b.txt', content: 'B' } }, { say: 'done' }],
 * });
 * session.baseUrl;          // `${server.url}/s/trial-1`: the vendor root, e.g. ANTHROPIC_BASE_URL or GOOGLE_GEMINI_BASE_URL
 * session.openAiBaseUrl;    // `${session.baseUrl}/v1`: OPENAI_BASE_URL
 * session.calls;            // RecordedCall[]: every request of this session, in arrival order
 * session.usage();          // totals of the usage the server reported: {input_tokens, output_tokens, cached_tokens}
 * await server.close();
 * ```
 * Requests without the `/s/<id>` prefix belong to session `default`. Sessions not registered get
 * `server.defaultScenario` (settable; `[{ say: 'done' }]` unless given to startScriptedModelServer).
 * Over HTTP (for a server in another process): `PUT /_sessions/<id>` with a Scenario as JSON body registers it,
 * `GET /_sessions/<id>` returns `{ calls }`. As a process: `node dist/test/support/scripted-model-server.js
 * [--host H] [--port P] [--scenario file.json] [--sessions file.json]` (the default scenario; a scenario per session
 * id) prints `{"url":…}` on its first stdout line and serves until killed.
 *
 * ## Endpoints (under `/s/<id>`, `?beta=true` and other query strings accepted)
 * - OpenAI Chat Completions: `POST /v1/chat/completions` (`stream: true` → SSE; `return_token_ids` / `logprobs` get
 *   token ids and logprobs as vLLM returns them, see ./vllm-tokens.ts; `stream_options.include_usage` adds a
 *   usage chunk, as the vendor: none without it), `GET /v1/models`.
 * - OpenAI Completions: `POST /v1/completions` (text or token-id prompts; the turn as text; `return_token_ids` /
 *   `logprobs` as vLLM, see ./vllm-completions.ts; the usage chunk only with `stream_options.include_usage`).
 * - Anthropic Messages: `POST /v1/messages` (`stream: true` → SSE), `POST /v1/messages/count_tokens`.
 * - OpenAI Responses: `POST /v1/responses` (`stream: true` → SSE, `type` in every payload; `enable_response_messages`
 *   and the logprobs `include` as vLLM, see ./vllm-completions.ts); a WebSocket upgrade on
 *   `/v1/responses` gets 404 at once, so codex falls back to HTTP.
 * - Gemini: `POST /v1beta/models/<m>:generateContent`, `:streamGenerateContent` (`?alt=sse` → SSE, else a JSON
 *   array), `:countTokens`.
 * Any credential is accepted (`Authorization: Bearer`, `x-api-key`, `x-goog-api-key`, `?key=`); it is recorded in
 * `RecordedCall.credential`, so tests can check which key reached the vendor.
 *
 * ## Scenarios
 * A scenario is a list of abstract turns, rendered per dialect:
 * - `{ shell: cmd }`: a call of the request's shell-like tool (Bash, shell, exec_command, run_shell_command, bash,
 *   execute_command, …, else any tool with a `command`/`cmd` parameter), its parameter names and types taken from the
 *   tool's own JSON schema (`command` as a string, or `["bash","-lc",cmd]` when the schema says array; an array
 *   `commands`, as cline's run_commands, is a list of commands: `[cmd]`).
 * - `{ write: { path, content } }`: a call of the write-like tool (Write, write_file, write, write_to_file,
 *   create_file, codex's apply_patch), else rendered as a shell command.
 * - `{ say: text }`: a final assistant text (end_turn / stop).
 * - `{ text: reply }`: a literal assistant text that is a turn (agents without tool calls: aider, terminus).
 * - `{ call: { name, arguments } }`: a literal tool call, for agent-specific oddities (cline's submit_and_exit).
 * The turn index is the number of assistant turns already in the request's conversation (a run of consecutive
 * assistant items counts once), so retries are idempotent and side calls do not desync it. A request is a side call
 * when it asks for JSON output (`response_format`, `responseMimeType: application/json`) or has no usable tool for
 * a tool turn: it gets the JSON schema filled minimally (first enum values), or "ok". Past the last turn, the server
 * says "done".
 *
 * Usage is deterministic: `scriptedUsage(turnIndex)` for turns, `SIDE_CALL_USAGE` for side calls; `input_tokens`
 * counts cached tokens too (Anthropic gets them split into `input_tokens` + `cache_read_input_tokens`).
 *
 * Faults (`scenario.fault`): `rate-limit` (429 + `retry-after`), `server-error` (500), `overloaded` (529),
 * `auth` (401), `context-window` (400, the vendor's "too long" error), `stream-cut` (SSE destroyed mid-way; JSON
 * requests get the connection destroyed after the headers), `stall` (no answer until the client goes away). The
 * fault hits the first `times` (default: all) generation calls (side calls too, not token counts) whose turn index
 * is at least `atTurn` (default 0); `auth` also refuses model lists. `die`: the server drops the call and stops
 * listening (an upstream that dies mid-trial: connection refused from then on, for every session).
 * Server-wide faults, whatever the session: `server.faultWindow({ kind: 'rate-limit' | 'overloaded', durationMs,
 * retryAfterSec })` answers every generation call arriving in the next `durationMs` with a 429 (with `retry-after`)
 * or a 529 (over HTTP: `PUT /_fault-window` with that JSON); `server.down()` stops listening (connection refused)
 * until `server.up()` listens again on the same port.
 * `scenario.sseDelayMs` spaces SSE events out, to observe streaming through a proxy; `scenario.replyDelayMs` answers
 * generation calls that much later (with `endedAt` on each recorded call: how many were in flight at once);
 * `scenario.streamUsage: false` never sends an OpenAI-style stream's usage chunk (a server ignoring `stream_options`).
 */
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createServer } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

import { z } from 'zod';

import { withVllmTokens } from './vllm-tokens';
import { COMPLETIONS_TOOL, completionsAnswer, completionsTurnIndex, withVllmResponsesTokens } from './vllm-completions';

// ---------------------------------------------------------------------------------------------------------------
// Scenario

const turnSchema = z.union([
  z.strictObject({ shell: z.string() }),
  z.strictObject({ write: z.strictObject({ path: z.string(), content: z.string() }) }),
  z.strictObject({ say: z.string() }),
  z.strictObject({ text: z.string() }),
  z.strictObject({ call: z.strictObject({ name: z.string(), arguments: z.record(z.string(), z.unknown()) }) }),
]);
export type ScriptedTurn = z.infer<typeof turnSchema>;

export const FAULT_KINDS = [
  'rate-limit',
  'server-error',
  'overloaded',
  'auth',
  'context-window',
  'stream-cut',
  'stall',
  'die',
] as const;
export type FaultKind = (typeof FAULT_KINDS)[number];

export const scenarioSchema = z.strictObject({
  turns: z.array(turnSchema),
  fault: z
    .strictObject({
      kind: z.enum(FAULT_KINDS),
      times: z.number().int().positive().optional(),
      atTurn: z.number().int().nonnegative().optional(),
      retryAfterSec: z.number().nonnegative().optional(),
    })
    .optional(),
  sseDelayMs: z.number().nonnegative().optional(),
  /** Generation calls are answered this long after they arrive (calls in flight at once can then be seen). */
  replyDelayMs: z.number().nonnegative().optional(),
  /** false: OpenAI-style streams never carry a usage chunk, asked or not (a server that ignores `stream_options`). */
  streamUsage: z.boolean().optional(),
});
export type Scenario = z.infer<typeof scenarioSchema>;

export interface Usage {
  input_tokens: number;
  output_tokens: number;
  cached_tokens: number;
}

export function scriptedUsage(turnIndex: number): Usage {
  return { input_tokens: 1000 + 100 * turnIndex, output_tokens: 20 + turnIndex, cached_tokens: 50 * turnIndex };
}
export const SIDE_CALL_USAGE: Usage = { input_tokens: 40, output_tokens: 4, cached_tokens: 0 };

export type Dialect = 'openai-chat' | 'openai-completions' | 'anthropic' | 'openai-responses' | 'gemini';

export interface RecordedCall {
  session: string;
  dialect: Dialect | 'other';
  method: string;
  path: string;
  stream: boolean;
  /** Turn rendered, or null for side calls, token counts and model lists. */
  turnIndex: number | null;
  side: boolean;
  status: number;
  fault: FaultKind | null;
  usage: Usage | null;
  credential: string | null;
  /** The request's headers as they arrived (what a gateway passed on). */
  headers: Record<string, string | string[] | undefined>;
  /** The `X-Session-ID` header (prefix-cache affinity, as SkyRL sends it), or null. */
  sessionHeader: string | null;
  requestBody: unknown;
  /** When the request arrived (ms since the epoch). */
  at: number;
  /** When its answer ended or the connection closed (ms since the epoch); absent while in flight. */
  endedAt?: number;
}

export interface ScriptedSession {
  id: string;
  baseUrl: string;
  openAiBaseUrl: string;
  calls: RecordedCall[];
  usage(): Usage;
}

export interface ScriptedModelServer {
  url: string;
  port: number;
  defaultScenario: Scenario;
  session(id: string, scenario: Scenario): ScriptedSession;
  calls(id: string): RecordedCall[];
  faultWindow(window: FaultWindow): void;
  down(): Promise<void>;
  up(): Promise<void>;
  close(): Promise<void>;
}

export const faultWindowSchema = z.strictObject({
  kind: z.enum(['rate-limit', 'overloaded']),
  durationMs: z.number().nonnegative(),
  retryAfterSec: z.number().nonnegative().optional(),
});
export type FaultWindow = z.infer<typeof faultWindowSchema>;

// ---------------------------------------------------------------------------------------------------------------
// Tools and turns

interface ToolSpec {
  name: string;
  schema: JsonSchema;
  /** Responses API custom (freeform) tool: the call carries a string `input`, not JSON arguments. */
  freeform: boolean;
}

interface JsonSchema {
  type?: string | string[];
  properties?: Record<string, JsonSchema>;
  required?: string[];
  items?: JsonSchema;
  enum?: unknown[];
  anyOf?: JsonSchema[];
  oneOf?: JsonSchema[];
}

type Reply =
  | { kind: 'text'; text: string; final: boolean }
  | { kind: 'tool'; name: string; args: Record<string, unknown>; freeform?: string };

const SHELL_TOOLS = [
  'bash',
  'shell',
  'exec_command',
  'run_shell_command',
  'execute_command',
  'run_command',
  'run_commands',
  'terminal',
  'local_shell',
];
const WRITE_TOOLS = ['write', 'write_file', 'write_to_file', 'create_file', 'apply_patch'];
const COMMAND_PARAMS = ['command', 'cmd', 'commands', 'script'];
const PATH_PARAMS = ['file_path', 'filePath', 'path', 'absolute_path', 'filename', 'target_file', 'file'];
const CONTENT_PARAMS = ['content', 'contents', 'text', 'file_text', 'data'];

function findTool(tools: ToolSpec[], names: string[], hasParam: string[]): ToolSpec | undefined {
  for (const name of names) {
    const tool = tools.find((t) => t.name.toLowerCase() === name);
    if (tool) return tool;
  }
  return tools.find((t) => !t.freeform && hasParam.some((p) => t.schema.properties?.[p] !== undefined));
}

function schemaType(schema: JsonSchema | undefined): string {
  const type = Array.isArray(schema?.type) ? schema?.type[0] : schema?.type;
  if (type) return type.toLowerCase();
  const alt = schema?.anyOf?.[0] ?? schema?.oneOf?.[0];
  return alt ? schemaType(alt) : 'string';
}

/** A minimal value of the schema: first enum value, empty collections, required object keys filled. */
export function minimalValue(schema: JsonSchema | undefined): unknown {
  if (schema?.enum && schema.enum.length > 0) return schema.enum[0];
  switch (schemaType(schema)) {
    case 'object': {
      const out: Record<string, unknown> = {};
      const props = schema?.properties ?? {};
      for (const key of schema?.required ?? Object.keys(props)) out[key] = minimalValue(props[key]);
      return out;
    }
    case 'array':
      return [];
    case 'number':
    case 'integer':
      return 0;
    case 'boolean':
      return false;
    default:
      return 'ok';
  }
}

/** Arguments for a tool: the given values under the schema's own parameter names, other required ones minimal. */
function fillArgs(tool: ToolSpec, values: Record<string, unknown>): Record<string, unknown> {
  const props = tool.schema.properties ?? {};
  const args: Record<string, unknown> = { ...values };
  for (const key of tool.schema.required ?? []) {
    if (!(key in args)) args[key] = minimalValue(props[key]);
  }
  return args;
}

function paramName(tool: ToolSpec, candidates: string[]): string {
  const props = tool.schema.properties ?? {};
  return candidates.find((c) => props[c] !== undefined) ?? candidates[0]!;
}

function shellReply(tool: ToolSpec, command: string): Reply {
  const param = paramName(tool, COMMAND_PARAMS);
  const isArray = schemaType(tool.schema.properties?.[param]) === 'array';
  // An array `commands` is a list of shell commands (cline's run_commands); an array `command` is one argv.
  const value = !isArray ? command : param === 'commands' ? [command] : ['bash', '-lc', command];
  return { kind: 'tool', name: tool.name, args: fillArgs(tool, { [param]: value }) };
}

function shellQuote(text: string): string {
  return `'${text.replace(/'/g, `'\\''`)}'`;
}

function writeAsShell(path: string, content: string): string {
  return `mkdir -p "$(dirname ${shellQuote(path)})" && printf '%s' ${shellQuote(content)} > ${shellQuote(path)}`;
}

function applyPatchText(path: string, content: string): string {
  const lines = content.split('\n').map((line) => `+${line}`);
  return ['*** Begin Patch', `*** Add File: ${path}`, ...lines, '*** End Patch', ''].join('\n');
}

/** The reply for a tool turn, or null when the request offers no tool able to carry it (a side call). */
function renderTurn(turn: ScriptedTurn, tools: ToolSpec[]): Reply | null {
  if ('say' in turn) return { kind: 'text', text: turn.say, final: true };
  if ('text' in turn) return { kind: 'text', text: turn.text, final: false };
  if ('call' in turn) {
    const tool = tools.find((t) => t.name === turn.call.name);
    return tool ? { kind: 'tool', name: tool.name, args: fillArgs(tool, turn.call.arguments) } : null;
  }
  const shell = findTool(tools, SHELL_TOOLS, COMMAND_PARAMS);
  if ('shell' in turn) return shell ? shellReply(shell, turn.shell) : null;
  const { path, content } = turn.write;
  const write = findTool(tools, WRITE_TOOLS, CONTENT_PARAMS);
  if (write?.name === 'apply_patch') {
    const patch = applyPatchText(path, content);
    if (write.freeform) return { kind: 'tool', name: write.name, args: {}, freeform: patch };
    return { kind: 'tool', name: write.name, args: fillArgs(write, { [paramName(write, ['input', 'patch'])]: patch }) };
  }
  if (write) {
    const args = { [paramName(write, PATH_PARAMS)]: path, [paramName(write, CONTENT_PARAMS)]: content };
    return { kind: 'tool', name: write.name, args: fillArgs(write, args) };
  }
  return shell ? shellReply(shell, writeAsShell(path, content)) : null;
}

/** Counts maximal runs of assistant items: one run per assistant turn, however the client split it. */
function countRuns<T>(items: T[], isAssistant: (item: T) => boolean): number {
  let runs = 0;
  let inRun = false;
  for (const item of items) {
    const assistant = isAssistant(item);
    if (assistant && !inRun) runs++;
    inRun = assistant;
  }
  return runs;
}

// ---------------------------------------------------------------------------------------------------------------
// Dialects: reading a request

type Body = Record<string, unknown>;

function asArray(value: unknown): Body[] {
  return Array.isArray(value) ? (value.filter((v) => v !== null && typeof v === 'object') as Body[]) : [];
}

function asSchema(value: unknown): JsonSchema {
  return value !== null && typeof value === 'object' ? value : {};
}

interface ParsedRequest {
  tools: ToolSpec[];
  turnIndex: number;
  /** JSON schema the client asks the answer to follow (side calls), or null. */
  jsonSchema: JsonSchema | null;
  model: string;
}

function parseChat(body: Body): ParsedRequest {
  const tools = asArray(body.tools).map((t) => {
    const fn = (t.function ?? {}) as Body;
    return { name: String(fn.name), schema: asSchema(fn.parameters), freeform: false };
  });
  for (const fn of asArray(body.functions)) {
    tools.push({ name: String(fn.name), schema: asSchema(fn.parameters), freeform: false });
  }
  const format = (body.response_format ?? null) as Body | null;
  const jsonSchema =
    format && (format.type === 'json_schema' || format.type === 'json_object')
      ? asSchema((format.json_schema as Body | undefined)?.schema ?? { type: 'object' })
      : null;
  return {
    tools,
    turnIndex: countRuns(asArray(body.messages), (m) => m.role === 'assistant'),
    jsonSchema,
    model: typeof body.model === 'string' ? body.model : 'scripted',
  };
}

function parseAnthropic(body: Body): ParsedRequest {
  const tools = asArray(body.tools)
    .filter((t) => t.input_schema !== undefined)
    .map((t) => ({ name: String(t.name), schema: asSchema(t.input_schema), freeform: false }));
  return {
    tools,
    turnIndex: countRuns(asArray(body.messages), (m) => m.role === 'assistant'),
    jsonSchema: null,
    model: typeof body.model === 'string' ? body.model : 'scripted',
  };
}

const RESPONSES_ASSISTANT_ITEMS = new Set([
  'function_call',
  'custom_tool_call',
  'local_shell_call',
  'reasoning',
  'web_search_call',
]);

function parseResponses(body: Body, previousTurns: Map<string, number>): ParsedRequest {
  const tools: ToolSpec[] = asArray(body.tools).flatMap((t): ToolSpec[] => {
    if (t.type === 'function') return [{ name: String(t.name), schema: asSchema(t.parameters), freeform: false }];
    if (t.type === 'custom') return [{ name: String(t.name), schema: {}, freeform: true }];
    return [];
  });
  const input = typeof body.input === 'string' ? [] : asArray(body.input);
  const isAssistant = (item: Body) =>
    RESPONSES_ASSISTANT_ITEMS.has(String(item.type)) || (item.role === 'assistant' && item.type !== 'function_call');
  const previous = typeof body.previous_response_id === 'string' ? previousTurns.get(body.previous_response_id) : null;
  const text = (body.text ?? {}) as Body;
  const format = (text.format ?? null) as Body | null;
  return {
    tools,
    turnIndex: (previous == null ? 0 : previous + 1) + countRuns(input, isAssistant),
    jsonSchema: format?.type === 'json_schema' ? asSchema(format.schema) : null,
    model: typeof body.model === 'string' ? body.model : 'scripted',
  };
}

function parseGemini(body: Body, model: string): ParsedRequest {
  const tools = asArray(body.tools).flatMap((t) =>
    asArray(t.functionDeclarations).map((fn) => ({
      name: String(fn.name),
      schema: asSchema(fn.parametersJsonSchema ?? fn.parameters),
      freeform: false,
    }))
  );
  const config = (body.generationConfig ?? {}) as Body;
  const jsonSchema =
    config.responseMimeType === 'application/json'
      ? asSchema(config.responseJsonSchema ?? config.responseSchema ?? { type: 'object' })
      : null;
  return {
    tools,
    turnIndex: countRuns(asArray(body.contents), (c) => c.role === 'model'),
    jsonSchema,
    model,
  };
}

// ---------------------------------------------------------------------------------------------------------------
// Dialects: writing an answer

interface Answer {
  reply: Reply;
  usage: Usage;
  model: string;
  /** Distinguishes ids per turn (tool call ids must be unique within a conversation). */
  turnKey: string;
}

type SseEvent = { event?: string; data: unknown };

/** An OpenAI-style stream's usage chunk: no choices, the usage. */
function isUsageChunk(data: unknown): boolean {
  const chunk = data as { choices?: unknown[]; usage?: unknown };
  return Array.isArray(chunk.choices) && chunk.choices.length === 0 && chunk.usage !== undefined;
}

function chatAnswer(a: Answer): { json: unknown; events: SseEvent[] } {
  const id = `chatcmpl-${a.turnKey}`;
  const usage = {
    prompt_tokens: a.usage.input_tokens,
    completion_tokens: a.usage.output_tokens,
    total_tokens: a.usage.input_tokens + a.usage.output_tokens,
    prompt_tokens_details: { cached_tokens: a.usage.cached_tokens },
  };
  const chunk = (delta: unknown, finish: string | null) => ({
    id,
    object: 'chat.completion.chunk',
    created: 0,
    model: a.model,
    choices: [{ index: 0, delta, finish_reason: finish }],
  });
  const completion = (message: unknown, finish: string) => ({
    id,
    object: 'chat.completion',
    created: 0,
    model: a.model,
    choices: [{ index: 0, message, finish_reason: finish }],
    usage,
  });
  const usageChunk = { data: { id, object: 'chat.completion.chunk', created: 0, model: a.model, choices: [], usage } };
  const { reply } = a;
  if (reply.kind === 'text') {
    const half = Math.ceil(reply.text.length / 2);
    return {
      json: completion({ role: 'assistant', content: reply.text }, 'stop'),
      events: [
        { data: chunk({ role: 'assistant', content: reply.text.slice(0, half) }, null) },
        { data: chunk({ content: reply.text.slice(half) }, null) },
        { data: chunk({}, 'stop') },
        usageChunk,
      ],
    };
  }
  const callId = `call_${a.turnKey}`;
  const args = JSON.stringify(reply.args);
  const half = Math.ceil(args.length / 2);
  const call = (fn: unknown, first: boolean) => ({
    index: 0,
    ...(first ? { id: callId, type: 'function' } : {}),
    function: fn,
  });
  const toolCalls = [{ id: callId, type: 'function', function: { name: reply.name, arguments: args } }];
  return {
    json: completion({ role: 'assistant', content: null, tool_calls: toolCalls }, 'tool_calls'),
    events: [
      { data: chunk({ role: 'assistant', tool_calls: [call({ name: reply.name, arguments: '' }, true)] }, null) },
      { data: chunk({ tool_calls: [call({ arguments: args.slice(0, half) }, false)] }, null) },
      { data: chunk({ tool_calls: [call({ arguments: args.slice(half) }, false)] }, null) },
      { data: chunk({}, 'tool_calls') },
      usageChunk,
    ],
  };
}

function anthropicAnswer(a: Answer): { json: unknown; events: SseEvent[] } {
  const { reply } = a;
  const usage = {
    input_tokens: a.usage.input_tokens - a.usage.cached_tokens,
    output_tokens: a.usage.output_tokens,
    cache_read_input_tokens: a.usage.cached_tokens,
    cache_creation_input_tokens: 0,
  };
  const block =
    reply.kind === 'text'
      ? { type: 'text', text: reply.text }
      : { type: 'tool_use', id: `toolu_${a.turnKey}`, name: reply.name, input: reply.args };
  const stopReason = reply.kind === 'text' ? 'end_turn' : 'tool_use';
  const message = {
    id: `msg_${a.turnKey}`,
    type: 'message',
    role: 'assistant',
    model: a.model,
    content: [block],
    stop_reason: stopReason,
    stop_sequence: null,
    usage,
  };
  const ev = (type: string, data: Body): SseEvent => ({ event: type, data: { type, ...data } });
  const body = reply.kind === 'text' ? reply.text : JSON.stringify(reply.args);
  const half = Math.ceil(body.length / 2);
  const delta = (part: string) =>
    reply.kind === 'text' ? { type: 'text_delta', text: part } : { type: 'input_json_delta', partial_json: part };
  const startBlock = reply.kind === 'text' ? { type: 'text', text: '' } : { ...block, input: {} };
  return {
    json: message,
    events: [
      // As the vendor does: message_start carries the input usage, message_delta the final output tokens.
      ev('message_start', {
        message: { ...message, content: [], stop_reason: null, usage: { ...usage, output_tokens: 1 } },
      }),
      ev('content_block_start', { index: 0, content_block: startBlock }),
      ev('ping', {}),
      ev('content_block_delta', { index: 0, delta: delta(body.slice(0, half)) }),
      ev('content_block_delta', { index: 0, delta: delta(body.slice(half)) }),
      ev('content_block_stop', { index: 0 }),
      ev('message_delta', {
        delta: { stop_reason: stopReason, stop_sequence: null },
        usage: { output_tokens: a.usage.output_tokens },
      }),
      ev('message_stop', {}),
    ],
  };
}

function responsesAnswer(a: Answer, responseId: string): { json: unknown; events: SseEvent[] } {
  const { reply } = a;
  const usage = {
    input_tokens: a.usage.input_tokens,
    input_tokens_details: { cached_tokens: a.usage.cached_tokens },
    output_tokens: a.usage.output_tokens,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: a.usage.input_tokens + a.usage.output_tokens,
  };
  const itemId = `${reply.kind === 'text' ? 'msg' : 'fc'}_${a.turnKey}`;
  const item =
    reply.kind === 'text'
      ? {
          type: 'message',
          id: itemId,
          status: 'completed',
          role: 'assistant',
          content: [{ type: 'output_text', text: reply.text, annotations: [] }],
        }
      : reply.freeform !== undefined
        ? {
            type: 'custom_tool_call',
            id: itemId,
            status: 'completed',
            call_id: `call_${a.turnKey}`,
            name: reply.name,
            input: reply.freeform,
          }
        : {
            type: 'function_call',
            id: itemId,
            status: 'completed',
            call_id: `call_${a.turnKey}`,
            name: reply.name,
            arguments: JSON.stringify(reply.args),
          };
  const response = (status: string, output: unknown[], withUsage: boolean) => ({
    id: responseId,
    object: 'response',
    created_at: 0,
    status,
    model: a.model,
    output,
    usage: withUsage ? usage : null,
  });
  let seq = 0;
  const ev = (type: string, data: Body): SseEvent => ({ event: type, data: { type, sequence_number: seq++, ...data } });
  const events: SseEvent[] = [
    ev('response.created', { response: response('in_progress', [], false) }),
    ev('response.in_progress', { response: response('in_progress', [], false) }),
  ];
  if (item.type === 'message' && reply.kind === 'text') {
    const half = Math.ceil(reply.text.length / 2);
    const part = { type: 'output_text', text: '', annotations: [] };
    const at = { item_id: itemId, output_index: 0, content_index: 0 };
    events.push(
      ev('response.output_item.added', { output_index: 0, item: { ...item, status: 'in_progress', content: [] } }),
      ev('response.content_part.added', { ...at, part }),
      ev('response.output_text.delta', { ...at, delta: reply.text.slice(0, half) }),
      ev('response.output_text.delta', { ...at, delta: reply.text.slice(half) }),
      ev('response.output_text.done', { ...at, text: reply.text }),
      ev('response.content_part.done', { ...at, part: { ...part, text: reply.text } })
    );
  } else if (item.type === 'custom_tool_call') {
    events.push(
      ev('response.output_item.added', { output_index: 0, item: { ...item, status: 'in_progress', input: '' } }),
      ev('response.custom_tool_call_input.delta', { item_id: itemId, output_index: 0, delta: item.input }),
      ev('response.custom_tool_call_input.done', { item_id: itemId, output_index: 0, input: item.input })
    );
  } else if (reply.kind === 'tool') {
    const args = JSON.stringify(reply.args);
    const half = Math.ceil(args.length / 2);
    const at = { item_id: itemId, output_index: 0 };
    events.push(
      ev('response.output_item.added', { output_index: 0, item: { ...item, status: 'in_progress', arguments: '' } }),
      ev('response.function_call_arguments.delta', { ...at, delta: args.slice(0, half) }),
      ev('response.function_call_arguments.delta', { ...at, delta: args.slice(half) }),
      ev('response.function_call_arguments.done', { ...at, arguments: args })
    );
  }
  events.push(
    ev('response.output_item.done', { output_index: 0, item }),
    ev('response.completed', { response: response('completed', [item], true) })
  );
  return { json: response('completed', [item], true), events };
}

function geminiAnswer(a: Answer): { json: unknown; events: SseEvent[] } {
  const { reply } = a;
  const usageMetadata = {
    promptTokenCount: a.usage.input_tokens,
    candidatesTokenCount: a.usage.output_tokens,
    totalTokenCount: a.usage.input_tokens + a.usage.output_tokens,
    cachedContentTokenCount: a.usage.cached_tokens,
  };
  const candidate = (parts: unknown[], finish: boolean) => ({
    content: { role: 'model', parts },
    index: 0,
    ...(finish ? { finishReason: 'STOP' } : {}),
  });
  const chunk = (parts: unknown[], finish: boolean) => ({
    candidates: [candidate(parts, finish)],
    ...(finish ? { usageMetadata } : {}),
    modelVersion: a.model,
    responseId: `resp_${a.turnKey}`,
  });
  if (reply.kind === 'text') {
    const half = Math.ceil(reply.text.length / 2);
    return {
      json: chunk([{ text: reply.text }], true),
      events: [
        { data: chunk([{ text: reply.text.slice(0, half) }], false) },
        { data: chunk([{ text: reply.text.slice(half) }], true) },
      ],
    };
  }
  const part = { functionCall: { name: reply.name, args: reply.args } };
  return { json: chunk([part], true), events: [{ data: chunk([part], true) }] };
}

// ---------------------------------------------------------------------------------------------------------------
// Faults

function faultBody(dialect: Dialect, kind: FaultKind): { status: number; body: unknown } {
  const [status, type, message] = (
    {
      'rate-limit': [429, 'rate_limit_error', 'Rate limit reached for requests (scripted)'],
      'server-error': [500, 'api_error', 'Internal server error (scripted)'],
      overloaded: [529, 'overloaded_error', 'Overloaded (scripted)'],
      auth: [401, 'authentication_error', 'invalid x-api-key (scripted)'],
      'context-window': [
        400,
        'invalid_request_error',
        'prompt is too long: 250000 tokens > 200000 maximum; context_length_exceeded (scripted)',
      ],
      'stream-cut': [500, 'api_error', 'stream cut (scripted)'],
      stall: [500, 'api_error', 'stall (scripted)'],
      die: [500, 'api_error', 'died (scripted)'],
    } as const
  )[kind];
  if (dialect === 'anthropic') return { status, body: { type: 'error', error: { type, message } } };
  if (dialect === 'gemini') {
    const geminiStatus = { 429: 'RESOURCE_EXHAUSTED', 401: 'UNAUTHENTICATED', 400: 'INVALID_ARGUMENT' } as const;
    return {
      status,
      body: {
        error: { code: status, message, status: geminiStatus[status as 429 | 401 | 400] ?? 'UNAVAILABLE' },
      },
    };
  }
  const code =
    kind === 'context-window' ? 'context_length_exceeded' : kind === 'rate-limit' ? 'rate_limit_exceeded' : null;
  return { status, body: { error: { message, type, code } } };
}

// ---------------------------------------------------------------------------------------------------------------
// Server

const MAX_BODY_BYTES = 64 * 2 ** 20;

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES) throw new Error('request body too large');
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString('utf8');
}

function credentialOf(req: IncomingMessage, url: URL): string | null {
  const auth = req.headers.authorization;
  if (auth) return auth.replace(/^Bearer\s+/i, '');
  const header = req.headers['x-api-key'] ?? req.headers['x-goog-api-key'];
  if (typeof header === 'string') return header;
  return url.searchParams.get('key');
}

function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), ...headers });
  res.end(text);
}

function sseFrame(event: SseEvent): string {
  return `${event.event ? `event: ${event.event}\n` : ''}data: ${JSON.stringify(event.data)}\n\n`;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

interface SessionState {
  scenario: Scenario | null;
  calls: RecordedCall[];
  faultsServed: number;
  /** Responses API ids → their turn index, for clients that send previous_response_id. */
  responseTurns: Map<string, number>;
}

function sumUsage(calls: RecordedCall[]): Usage {
  const total: Usage = { input_tokens: 0, output_tokens: 0, cached_tokens: 0 };
  for (const call of calls) {
    if (!call.usage) continue;
    total.input_tokens += call.usage.input_tokens;
    total.output_tokens += call.usage.output_tokens;
    total.cached_tokens += call.usage.cached_tokens;
  }
  return total;
}

const ROUTE = /^(?:\/s\/([^/]+))?(\/.*)$/;

export async function startScriptedModelServer(
  options: { host?: string; port?: number; defaultScenario?: Scenario } = {}
): Promise<ScriptedModelServer> {
  const sessions = new Map<string, SessionState>();
  const sockets = new Set<Socket>();
  let window: (FaultWindow & { until: number }) | null = null;
  const listen = (port: number, host: string) =>
    new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, host, () => {
        server.off('error', reject);
        resolve();
      });
    });
  const stopListening = () =>
    new Promise<void>((resolve, reject) => {
      for (const socket of sockets) socket.destroy();
      server.close((err) => (err ? reject(err) : resolve()));
    });
  const state = (id: string): SessionState => {
    let s = sessions.get(id);
    if (!s) {
      s = { scenario: null, calls: [], faultsServed: 0, responseTurns: new Map() };
      sessions.set(id, s);
    }
    return s;
  };
  const api: ScriptedModelServer = {
    url: '',
    port: 0,
    defaultScenario: options.defaultScenario ?? { turns: [{ say: 'done' }] },
    session(id, scenario) {
      const s = state(id);
      s.scenario = scenarioSchema.parse(scenario);
      s.calls.length = 0;
      s.faultsServed = 0;
      const baseUrl = `${api.url}/s/${id}`;
      return { id, baseUrl, openAiBaseUrl: `${baseUrl}/v1`, calls: s.calls, usage: () => sumUsage(s.calls) };
    },
    calls: (id) => state(id).calls,
    faultWindow(given) {
      const parsed = faultWindowSchema.parse(given);
      window = { ...parsed, until: Date.now() + parsed.durationMs };
    },
    down: () => (server.listening ? stopListening() : Promise.resolve()),
    up: () => (server.listening ? Promise.resolve() : listen(api.port, options.host ?? '127.0.0.1')),
    close: () => (server.listening ? stopListening() : Promise.resolve()),
  };

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://scripted');
    if (url.pathname === '/_fault-window' && req.method === 'PUT') {
      const parsed = faultWindowSchema.safeParse(JSON.parse(await readBody(req)));
      if (!parsed.success) return sendJson(res, 400, { error: parsed.error.message });
      api.faultWindow(parsed.data);
      return sendJson(res, 200, { ok: true });
    }
    const control = /^\/_sessions\/([^/]+)$/.exec(url.pathname);
    if (control) {
      const id = decodeURIComponent(control[1]!);
      if (req.method === 'PUT') {
        const parsed = scenarioSchema.safeParse(JSON.parse(await readBody(req)));
        if (!parsed.success) return sendJson(res, 400, { error: parsed.error.message });
        api.session(id, parsed.data);
        return sendJson(res, 200, { ok: true });
      }
      return sendJson(res, 200, { calls: state(id).calls });
    }
    const route = ROUTE.exec(url.pathname)!;
    const sessionId = route[1] ? decodeURIComponent(route[1]) : 'default';
    const rest = route[2]!;
    const session = state(sessionId);
    const scenario = session.scenario ?? api.defaultScenario;
    const text = req.method === 'POST' ? await readBody(req) : '';
    let body: Body = {};
    if (text) {
      try {
        body = JSON.parse(text) as Body;
      } catch {
        return sendJson(res, 400, { error: { message: 'request body is not JSON' } });
      }
    }
    const record: RecordedCall = {
      session: sessionId,
      dialect: 'other',
      method: req.method ?? 'GET',
      path: rest + url.search,
      stream: false,
      turnIndex: null,
      side: false,
      status: 200,
      fault: null,
      usage: null,
      credential: credentialOf(req, url),
      headers: { ...req.headers },
      sessionHeader: typeof req.headers['x-session-id'] === 'string' ? req.headers['x-session-id'] : null,
      requestBody: text ? body : null,
      at: Date.now(),
    };
    session.calls.push(record);
    // 'finish': the answer handed to the network, before the client can have it (so the next call comes after).
    res.once('finish', () => (record.endedAt ??= Date.now()));
    res.once('close', () => (record.endedAt ??= Date.now()));
    const reply = (status: number, json: unknown, headers?: Record<string, string>) => {
      record.status = status;
      sendJson(res, status, json, headers);
    };

    if (req.method === 'GET' && rest.endsWith('/models')) {
      if (scenario.fault?.kind === 'auth') {
        record.fault = 'auth';
        return reply(401, { error: { message: 'invalid x-api-key', type: 'authentication_error' } });
      }
      return reply(200, { object: 'list', data: [{ id: 'scripted', object: 'model', owned_by: 'scripted' }] });
    }
    if (rest.endsWith('/messages/count_tokens')) {
      record.dialect = 'anthropic';
      return reply(200, { input_tokens: SIDE_CALL_USAGE.input_tokens });
    }
    const gemini = /\/models\/([^/:]+):(generateContent|streamGenerateContent|countTokens)$/.exec(rest);
    if (gemini?.[2] === 'countTokens') {
      record.dialect = 'gemini';
      return reply(200, { totalTokens: SIDE_CALL_USAGE.input_tokens });
    }

    let dialect: Dialect;
    let parsed: ParsedRequest;
    let stream: boolean;
    if (req.method !== 'POST') return reply(404, { error: { message: `no route for ${req.method} ${rest}` } });
    if (rest.endsWith('/chat/completions')) {
      dialect = 'openai-chat';
      parsed = parseChat(body);
      stream = body.stream === true;
    } else if (rest.endsWith('/completions')) {
      dialect = 'openai-completions';
      const model = typeof body.model === 'string' ? body.model : 'scripted';
      parsed = { tools: [COMPLETIONS_TOOL], turnIndex: completionsTurnIndex(body), jsonSchema: null, model };
      stream = body.stream === true;
    } else if (rest.endsWith('/messages')) {
      dialect = 'anthropic';
      parsed = parseAnthropic(body);
      stream = body.stream === true;
    } else if (rest.endsWith('/responses')) {
      dialect = 'openai-responses';
      parsed = parseResponses(body, session.responseTurns);
      stream = body.stream === true;
    } else if (gemini) {
      dialect = 'gemini';
      parsed = parseGemini(body, decodeURIComponent(gemini[1]!));
      stream = gemini[2] === 'streamGenerateContent';
    } else {
      return reply(404, { error: { message: `no route for POST ${rest}` } });
    }
    record.dialect = dialect;
    record.stream = stream;
    if (scenario.replyDelayMs) await sleep(scenario.replyDelayMs);

    const turn: ScriptedTurn = scenario.turns[parsed.turnIndex] ?? { say: 'done' };
    const rendered = parsed.jsonSchema ? null : renderTurn(turn, parsed.tools);
    const side = rendered === null;
    const answerReply: Reply = side
      ? { kind: 'text', text: parsed.jsonSchema ? JSON.stringify(minimalValue(parsed.jsonSchema)) : 'ok', final: true }
      : rendered;
    record.side = side;
    record.turnIndex = side ? null : parsed.turnIndex;

    if (window && Date.now() < window.until) {
      record.fault = window.kind;
      const { status, body: errorBody } = faultBody(dialect, window.kind);
      const headers: Record<string, string> =
        window.kind === 'rate-limit' ? { 'retry-after': String(window.retryAfterSec ?? 1) } : {};
      return reply(status, errorBody, headers);
    }
    const fault = scenario.fault;
    if (
      fault &&
      parsed.turnIndex >= (fault.atTurn ?? 0) &&
      session.faultsServed < (fault.times ?? Number.POSITIVE_INFINITY)
    ) {
      session.faultsServed++;
      record.fault = fault.kind;
      if (fault.kind === 'stall') {
        record.status = 0;
        return new Promise<void>((resolve) => res.on('close', resolve));
      }
      if (fault.kind === 'die') {
        record.status = 0;
        return api.down();
      }
      if (fault.kind !== 'stream-cut') {
        const { status, body: errorBody } = faultBody(dialect, fault.kind);
        const headers: Record<string, string> =
          fault.kind === 'rate-limit' ? { 'retry-after': String(fault.retryAfterSec ?? 1) } : {};
        return reply(status, errorBody, headers);
      }
    }

    const usage = side ? SIDE_CALL_USAGE : scriptedUsage(parsed.turnIndex);
    record.usage = usage;
    const answer: Answer = {
      reply: answerReply,
      usage,
      model: parsed.model,
      turnKey: `${parsed.turnIndex}_${session.calls.length}`,
    };
    const responseId = `resp_${randomUUID()}`;
    if (dialect === 'openai-responses' && !side) session.responseTurns.set(responseId, parsed.turnIndex);
    const rendering =
      dialect === 'openai-chat'
        ? withVllmTokens(body, chatAnswer(answer))
        : dialect === 'anthropic'
          ? anthropicAnswer(answer)
          : dialect === 'openai-responses'
            ? withVllmResponsesTokens(body, responsesAnswer(answer, responseId))
            : dialect === 'openai-completions'
              ? completionsAnswer(body, answerReply, usage, parsed.model, answer.turnKey)
              : geminiAnswer(answer);
    const cut = record.fault === 'stream-cut';

    if (!stream) {
      if (cut) {
        record.status = 0;
        res.writeHead(200, { 'content-type': 'application/json' });
        res.flushHeaders();
        res.socket?.destroy();
        return;
      }
      return reply(200, rendering.json);
    }
    const sse = dialect !== 'gemini' || url.searchParams.get('alt') === 'sse';
    record.status = 200;
    res.writeHead(200, {
      'content-type': sse ? 'text/event-stream' : 'application/json',
      'cache-control': 'no-cache',
    });
    res.flushHeaders();
    // OpenAI and vLLM send a stream's usage chunk only when the request asks for it (`stream_options.include_usage`).
    const usageAsked =
      scenario.streamUsage !== false &&
      (body.stream_options as { include_usage?: unknown } | undefined)?.include_usage === true;
    const events = rendering.events.filter(
      (e) => usageAsked || !(dialect === 'openai-chat' || dialect === 'openai-completions') || !isUsageChunk(e.data)
    );
    const frames: string[] = sse
      ? events.map(sseFrame)
      : events.map((e, i) => `${i === 0 ? '[' : ','}${JSON.stringify(e.data)}`).concat(']');
    if (sse && (dialect === 'openai-chat' || dialect === 'openai-completions')) frames.push('data: [DONE]\n\n');
    const upTo = cut ? Math.max(1, Math.floor(frames.length / 2)) : frames.length;
    for (let i = 0; i < upTo; i++) {
      if (i > 0 && scenario.sseDelayMs) await sleep(scenario.sseDelayMs);
      res.write(frames[i]);
    }
    if (cut) {
      record.status = 0;
      res.socket?.destroy();
      return;
    }
    res.end();
  }

  const server = createServer((req, res) => {
    handle(req, res).catch((err: unknown) => {
      if (!res.headersSent) sendJson(res, 500, { error: { message: String(err) } });
      else res.destroy();
    });
  });
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  // WebSocket upgrades (codex tries one on /v1/responses first): refused at once, so the client falls back to HTTP.
  server.on('upgrade', (_req, socket: Socket) => {
    socket.end('HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n');
  });
  await listen(options.port ?? 0, options.host ?? '127.0.0.1');
  const address = server.address() as AddressInfo;
  api.port = address.port;
  const host = address.address.includes(':') ? `[${address.address}]` : address.address;
  api.url = `http://${host === '0.0.0.0' ? '127.0.0.1' : host}:${address.port}`;
  return api;
}

if (require.main === module) {
  const args = process.argv.slice(2);
  const flag = (name: string) => {
    const i = args.indexOf(name);
    return i >= 0 ? args[i + 1] : undefined;
  };
  const scenarioFile = flag('--scenario');
  const defaultScenario = scenarioFile
    ? scenarioSchema.parse(JSON.parse(readFileSync(scenarioFile, 'utf8')))
    : undefined;
  const sessionsFile = flag('--sessions');
  const sessions = sessionsFile
    ? z.record(z.string(), scenarioSchema).parse(JSON.parse(readFileSync(sessionsFile, 'utf8')))
    : {};
  startScriptedModelServer({ host: flag('--host'), port: Number(flag('--port') ?? 0), defaultScenario })
    .then((server) => {
      for (const [id, scenario] of Object.entries(sessions)) server.session(id, scenario);
      console.log(JSON.stringify({ url: server.url, port: server.port }));
    })
    .catch((err: unknown) => {
      console.error(`error: scripted model server: ${String(err)}`);
      process.exit(1);
    });
}
