/**
 * What the gateway needs to know of one wire dialect: which requests are its own, how to put the real key on an
 * upstream request, how to rebuild a response from its SSE events, and how to read usage and the conversation in
 * one neutral, OpenAI-style shape (for trajectories and exports). One file per dialect in dialects/.
 */
import type { Vendor } from '../contracts/job-config';
import type { Usage } from '../contracts/trial';
import type { SseEvent } from './sse';

export type DialectName = 'openai-chat' | 'openai-completions' | 'openai-responses' | 'anthropic' | 'gemini';
/** Who serves a dialect: the upstream (base URL and key) is per vendor. */
export type { Vendor };

export type { Usage };

export interface ToolCall {
  id: string;
  name: string;
  /** JSON arguments; freeform tools (codex's apply_patch) carry `{ input: <text> }`. */
  arguments: Record<string, unknown>;
}

/** A conversation message in OpenAI Chat form, whatever dialect it came from. */
export interface Message {
  role: 'system' | 'user' | 'assistant' | 'tool';
  content: string;
  tool_calls?: ToolCall[];
  /** For role "tool": the call it answers. */
  tool_call_id?: string;
  reasoning?: string;
}

/** A tool offered to the model, as an OpenAI function definition. */
export interface ToolDefinition {
  type: 'function';
  function: { name: string; description?: string; parameters?: unknown };
}

export type CallKind = 'generate' | 'count_tokens' | 'other';

export interface Dialect {
  name: DialectName;
  vendor: Vendor;
  /** The kind of call a path (below the vendor root) is, or null when it is not this dialect's. */
  match(path: string): CallKind | null;
  stream(body: Record<string, unknown>, path: string, query: URLSearchParams): boolean;
  model(body: Record<string, unknown>, path: string): string | null;
  /** The non-streamed response equivalent to a stream's events. */
  assemble(events: SseEvent[]): unknown;
  usage(response: unknown): Usage | null;
  conversation(request: Record<string, unknown>): Message[];
  tools(request: Record<string, unknown>): ToolDefinition[];
  reply(response: unknown): Message | null;
  /** Token ids and logprobs of the call, when the server returned them (vLLM, SGLang). */
  tokens?(response: unknown): CallTokens | null;
  /**
   * Sets on `body` (the gateway's copy) the parameters that make the upstream return token ids and logprobs (job.yaml
   * `tokens: true`), and names those the agent had not asked for itself: their reply fields are stripped again.
   */
  requestTokens?(body: Json): string[];
  /**
   * The request with usage asked for on its stream (OpenAI Chat streams carry none unless asked), or null when it
   * needs nothing added (not a stream, or it asks already). The parameter's name goes in a call's `added`.
   */
  askUsage?(body: Json): { body: Json; added: string } | null;
  /**
   * A reply (whole, or one stream event's payload) without the fields the `added` request parameters brought; null
   * when the whole event was theirs (then it is not passed on).
   */
  stripAdded?(payload: Json, added: string[]): Json | null;
}

/** A call's tokens as the server returned them: the prompt's ids, the completion's ids, one logprob per sampled id. */
export interface CallTokens {
  prompt_token_ids?: number[];
  token_ids?: number[];
  logprobs?: number[];
}

// Small readers of untyped wire JSON, shared by the dialects.
export type Json = Record<string, unknown>;

export function obj(value: unknown): Json {
  return value !== null && typeof value === 'object' && !Array.isArray(value) ? (value as Json) : {};
}

export function arr(value: unknown): Json[] {
  return Array.isArray(value) ? value.map(obj) : [];
}

export function str(value: unknown): string {
  return typeof value === 'string' ? value : '';
}

export function num(value: unknown): number {
  return typeof value === 'number' && Number.isFinite(value) ? value : 0;
}

/** Parses JSON tool arguments; text that is not a JSON object is kept under `input`. */
export function parseArguments(text: unknown): Record<string, unknown> {
  if (typeof text !== 'string') return obj(text);
  try {
    const parsed: unknown = JSON.parse(text || '{}');
    if (parsed !== null && typeof parsed === 'object' && !Array.isArray(parsed)) return parsed as Json;
  } catch {
    // Not JSON: keep the raw text.
  }
  return { input: text };
}

/** Text of a content field that is a string or a list of parts with `text`. */
export function textOf(content: unknown): string {
  if (typeof content === 'string') return content;
  return arr(content)
    .map((part) => str(part.text ?? part.content))
    .filter(Boolean)
    .join('\n');
}

/** A list of token ids, or undefined when the value is not one. */
export function idList(value: unknown): number[] | undefined {
  return Array.isArray(value) && value.every((v) => typeof v === 'number') ? value : undefined;
}

/** Sets each parameter the body does not already have with that value; the names of those it set. */
export function setParams(body: Json, params: Json): string[] {
  const added: string[] = [];
  for (const [key, value] of Object.entries(params)) {
    if (body[key] === value) continue;
    body[key] = value;
    added.push(key);
  }
  return added;
}
