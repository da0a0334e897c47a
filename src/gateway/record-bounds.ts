/**
 * Bounds on `llm-calls.jsonl`, which the gateway writes on the worker's disk outside the trial's collect budget: a
 * request or response body over MAX_RECORDED_BODY_CHARS is kept as a placeholder naming its size, and once the
 * file reaches MAX_CALLS_FILE_BYTES the bodies of later calls are not kept either (their usage and spend are).
 */
import type { LlmCallRecord } from './records';
import { LLM_CALLS_FILE } from '../contracts/paths';

export const MAX_RECORDED_BODY_CHARS = 8 * 2 ** 20;
export const MAX_CALLS_FILE_BYTES = 512 * 2 ** 20;
/** Past the file cap, even body-less lines stop after this much more (a flood of tiny calls). */
const METADATA_SLACK_BYTES = 16 * 2 ** 20;

/** The record's JSON line within the bounds, given the file's size so far; null when not even that fits. */
export function boundedRecordLine(call: LlmCallRecord, fileBytes: number): string | null {
  const request = bounded('request', call.request);
  const response = bounded('response', call.response);
  let line = `${JSON.stringify({ ...call, request, response })}\n`;
  if (fileBytes + Buffer.byteLength(line) <= MAX_CALLS_FILE_BYTES) return line;
  const dropped = `[not recorded: ${LLM_CALLS_FILE} reached ${MAX_CALLS_FILE_BYTES / 2 ** 20} MiB]`;
  line = `${JSON.stringify({ ...call, request: dropped, response: dropped })}\n`;
  return fileBytes + Buffer.byteLength(line) <= MAX_CALLS_FILE_BYTES + METADATA_SLACK_BYTES ? line : null;
}

function bounded(what: string, value: unknown): unknown {
  if (value === null || value === undefined) return value ?? null;
  const size = typeof value === 'string' ? value.length : JSON.stringify(value).length;
  return size > MAX_RECORDED_BODY_CHARS ? `[${what} of ${size} characters not recorded: over 8 MiB]` : value;
}
