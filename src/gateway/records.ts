/** `<trial>/agent/llm-calls.jsonl`: one line per model call, written by the gateway as each call ends. */
import { createReadStream } from 'node:fs';
import { createInterface } from 'node:readline';

import type { CallKind, DialectName, Usage } from './dialect';
import type { ApiErrorType } from '../contracts/trial-errors';

export interface LlmCallRecord {
  /** 1-based order of the call within the trial's execute step. */
  seq: number;
  started_at: string;
  finished_at: string;
  latency_ms: number;
  dialect: DialectName | null;
  kind: CallKind;
  method: string;
  /** Below the vendor root, without the query string (which may hold a key). */
  path: string;
  model: string | null;
  stream: boolean;
  /** HTTP status from upstream; 0 when the connection or the stream broke. */
  status: number;
  request: unknown;
  /** The response body; for streams, the response rebuilt from its events. */
  response: unknown;
  usage: Usage | null;
  /**
   * What the budget and limits counted instead of `usage`, when the call went upstream and its usage did not come
   * back whole (a stream cut, the agent gone mid-call): the request's input estimate plus its max output tokens.
   */
  charged?: Usage;
  error: { type: ApiErrorType | null; message: string } | null;
  /** Each request the gateway made upstream for this call (more than one when it retried); absent in older records. */
  attempts?: CallAttempt[];
  /** Milliseconds the call waited at the gateway: for shared rate limits, a slot toward the upstream, retries. */
  waited_ms?: number;
  /** Of `waited_ms`, the wait for leases of job.yaml `rate_limits` (present when a rule matched the call). */
  rate_limit_wait_ms?: number;
  /** The gateway refused the call (never sent upstream): the trial's `limits` or the job's `budget` was reached. */
  refused?: 'trial_limit' | 'job_budget';
  /** Request parameters the gateway added (job.yaml `tokens`); their fields were stripped from the agent's reply. */
  added?: string[];
  /** job.yaml `sampling` as enforced on this call, and what the agent had sent for each (null: nothing). */
  sampling?: { enforced: Record<string, number | string | boolean>; agent: Record<string, unknown> };
  /** With job.yaml `tokens: true`, as the server returned them: the prompt's token ids exactly as the model saw them. */
  prompt_token_ids?: number[];
  /** job.yaml `tokens: true` asked the server for ids and the reply had none (an error, a server without them). */
  tokens_missing?: true;
  /** The ids the model sampled for this call. */
  completion_token_ids?: number[];
  /** One logprob per sampled id (the sampling policy's). */
  logprobs?: number[];
  /** The job's policy version when the call started (job.yaml `policy_version`, `rollout ctl <job> policy-version`). */
  policy_version?: number;
  /** The replica (job.yaml `replicas`) that answered. */
  replica?: string;
}

/** One request upstream within a call. */
export interface CallAttempt {
  started_at: string;
  latency_ms: number;
  /** The upstream's status; 0 when no answer came (connection refused, DNS, TLS). */
  status: number;
  /** Why the attempt was not the answer (the upstream's error reply or the connection error); null for the answer. */
  error: string | null;
  /** The wait after this attempt before the next one. */
  wait_ms: number;
}

/** Reads the records of a calls file one line at a time (constant memory); a missing file has none. */
export async function* readCallRecords(file: string): AsyncGenerator<LlmCallRecord> {
  const stream = createReadStream(file, 'utf8');
  const lines = createInterface({ input: stream, crlfDelay: Infinity });
  try {
    let n = 0;
    for await (const line of lines) {
      n += 1;
      if (!line.trim()) continue;
      let record: LlmCallRecord;
      try {
        record = JSON.parse(line) as LlmCallRecord;
      } catch (err) {
        throw new Error(`${file}: line ${n}: not valid JSON (${(err as Error).message})`, { cause: err });
      }
      yield record;
    }
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  } finally {
    lines.close();
    stream.destroy();
  }
}
