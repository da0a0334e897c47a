/**
 * Eval Protocol's remote rollout contract (`POST /init`, `GET /status`) on Rollout trials: each rollout is one Trial
 * workflow whose id derives from `metadata.rollout_id`, so the same id twice starts one trial and status survives
 * any restart of this server.
 */
import { createHash } from 'node:crypto';
import { readdir } from 'node:fs/promises';
import path from 'node:path';

import type { Client } from '@temporalio/client';
import { WorkflowNotFoundError } from '@temporalio/client';
import { z } from 'zod';

import type { trialWorkflow } from '../../workflows';
import { namedTrial } from '../api/rollout';
import { boundedId, sanitize } from '../job/plan';
import { startTrialWorkflow } from '../api/submit';
import { jobFiles, readJson } from '../results/files';
import { primaryReward } from '../results/job-stats';
import type { TrialResult } from '../results/trial-result';
import { VENDOR_ENV } from '../gateway/upstreams';
import { sealEnv } from '../secrets/sealed-env';
import { upstreamModelUrl } from './tracing-url';
import type { TrialSpec, TrialSummary } from '../contracts/trial';
import { INFRASTRUCTURE_ERROR, isScored } from '../contracts/trial';
import { ifPresent } from '../files/absent';

const MessageSchema = z.looseObject({ role: z.string(), content: z.unknown().optional() });

/** A string the request must hold: "required" when it is missing, rather than zod's type message. */
const required = (what: string) =>
  z
    .string({ error: (issue) => (issue.input === undefined ? `required (${what})` : undefined) })
    .min(1, `empty (${what})`);

/**
 * The /init body. Eval Protocol's client sends all five metadata ids; Rollout needs only `rollout_id` (the
 * idempotency key) and, when it names the task, `row_id`; the others are kept as the rollout's trace tags.
 */
export function initRequestSchema(taskFrom: TaskFrom) {
  return z.looseObject({
    completion_params: z.looseObject({ model: required('the model the agent uses') }),
    messages: z.array(MessageSchema).optional(),
    tools: z.array(z.unknown()).nullish(),
    model_base_url: z.string().nullish(),
    api_key: z.string().nullish(),
    metadata: z.looseObject(
      {
        invocation_id: z.string().optional(),
        experiment_id: z.string().optional(),
        rollout_id: required('the idempotency key'),
        run_id: z.string().optional(),
        row_id: taskFrom === 'row_id' ? required('it names the task') : z.string().optional(),
        /** The trainer's policy (weights) version: stamped on each model call of the rollout (docs/rl.md). */
        policy_version: z.number().int().nonnegative().optional(),
      },
      { error: (issue) => (issue.input === undefined ? 'required (rollout_id, row_id, …)' : undefined) }
    ),
  });
}
export type InitRequest = z.infer<ReturnType<typeof initRequestSchema>>;
export type TaskFrom = 'row_id' | 'first_user_message';

const METADATA_MEMO = 'eval_protocol_metadata';

/** Eval Protocol's status codes (AIP-193 plus its own). */
export const STATUS = { FINISHED: 100, RUNNING: 101, INTERNAL: 13 } as const;

export const StatusResponseSchema = z.object({
  rollout_id: z.string(),
  terminated: z.boolean(),
  status: z.object({ code: z.number().int(), message: z.string() }),
  reward: z.number().nullable(),
  rewards: z.record(z.string(), z.number()).nullable(),
  error: z.object({ type: z.string(), message: z.string() }).nullable(),
});
export type StatusResponse = z.infer<typeof StatusResponseSchema>;

/** The /init metadata as kept in the memo: only `rollout_id` is sure to be there. */
export type RolloutMetadata = Pick<InitRequest['metadata'], 'rollout_id'> & Partial<InitRequest['metadata']>;

/** Every variable the gateway reads an OpenAI key from, emptied (an empty value counts as unset). */
const NO_OPENAI_KEY = Object.fromEntries(VENDOR_ENV.openai.keys.map((name) => [name, '']));

/** Field names of credentials a client may put in completion_params (`api_key`, `extra_headers`, …). */
const CREDENTIAL_FIELD = /(?:^|_)(?:api_?key|key|secret|password|auth|authorization|access_token|token|headers)$/i;

/**
 * completion_params without credential-like fields, at any depth: the rest goes in plain text into the trial's
 * Temporal history and the container (ROLLOUT_COMPLETION_PARAMS); a key belongs in /init's `api_key`, which is sealed.
 */
export function withoutCredentials(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(withoutCredentials);
  if (value === null || typeof value !== 'object') return value;
  const kept = Object.entries(value as Record<string, unknown>).filter(([name]) => !CREDENTIAL_FIELD.test(name));
  return Object.fromEntries(kept.map(([name, inner]) => [name, withoutCredentials(inner)]));
}

/**
 * The env a rollout's agent gets from /init (plain text: it goes into Temporal history and the container). The
 * caller's model URL is never paired with a key of this worker's: only /init's own api_key (sealed, added over this),
 * or none (empty values hide the agent config's OpenAI keys from the gateway's upstream).
 */
export function rolloutAgentEnv(request: InitRequest, baseUrl: string | undefined): Record<string, string> {
  const params = request.completion_params;
  return {
    ROLLOUT_MODEL: params.model,
    ROLLOUT_COMPLETION_PARAMS: JSON.stringify(withoutCredentials(params)),
    ROLLOUT_ROLLOUT_ID: request.metadata.rollout_id,
    ...(baseUrl ? { ROLLOUT_MODEL_BASE_URL: baseUrl, OPENAI_BASE_URL: baseUrl, ...NO_OPENAI_KEY } : {}),
  };
}

/** A request that cannot start a rollout (an unknown task, a model URL that names no model): 400. */
export class BadInitError extends Error {}

export class RemoteRollouts {
  constructor(
    private readonly client: Client,
    /** One planned trial per task of the served dataset, by task name. */
    private readonly tasks: Map<string, TrialSpec>,
    private readonly jobName: string,
    private readonly jobDir: string,
    private readonly taskFrom: TaskFrom,
    /** Whether a URL is this server's own (a tracing URL on it stands for the model it encodes). */
    private readonly isThisServer: (url: URL) => boolean
  ) {}

  /** What /init accepts under this server's `task_from`. */
  get initSchema() {
    return initRequestSchema(this.taskFrom);
  }

  /** Starts the rollout's trial, or finds the one already started for this rollout_id. */
  async init(request: InitRequest): Promise<{ rolloutId: string; trialName: string }> {
    const taskName = this.taskName(request);
    const planned = this.tasks.get(taskName);
    if (!planned) {
      const known = [...this.tasks.keys()];
      throw new BadInitError(
        `unknown task "${taskName}" (from ${this.taskFrom === 'row_id' ? 'metadata.row_id' : 'the first user message'}): ` +
          `the dataset has ${known.slice(0, 10).join(', ')}${known.length > 10 ? `, … (${known.length})` : ''}`
      );
    }
    const apiKey = request.api_key;
    let baseUrl: string | undefined;
    try {
      baseUrl = request.model_base_url ? upstreamModelUrl(request.model_base_url, this.isThisServer) : undefined;
    } catch (err) {
      throw new BadInitError((err as Error).message);
    }
    const version = request.metadata.policy_version;
    const trial: TrialSpec = {
      ...namedTrial(planned, trialNameOf(request.metadata.rollout_id)),
      agentEnv: rolloutAgentEnv(request, baseUrl),
      // The rollout's own version, fixed for its calls: a served rollout has no Job workflow whose version changes.
      ...(version !== undefined ? { policyVersion: version, policyVersionFixed: true } : {}),
    };
    // Bound to this trial: copied into another trial's input, it does not unseal.
    const sealed = apiKey ? sealEnv({ ROLLOUT_API_KEY: apiKey, OPENAI_API_KEY: apiKey }, trial) : undefined;
    const spec: TrialSpec = { ...trial, ...(sealed ? { sealedAgentEnv: sealed } : {}) };
    await startTrialWorkflow(this.client, spec, { [METADATA_MEMO]: request.metadata });
    return { rolloutId: request.metadata.rollout_id, trialName: spec.trialName };
  }

  /** Null when no rollout has this id. */
  async status(rolloutId: string): Promise<StatusResponse | null> {
    const handle = this.client.workflow.getHandle<typeof trialWorkflow>(this.workflowId(rolloutId));
    let description;
    try {
      description = await handle.describe();
    } catch (err) {
      if (err instanceof WorkflowNotFoundError) return null;
      throw err;
    }
    if (description.status.name === 'RUNNING') {
      return {
        rollout_id: rolloutId,
        terminated: false,
        status: { code: STATUS.RUNNING, message: 'running' },
        reward: null,
        rewards: null,
        error: null,
      };
    }
    if (description.status.name !== 'COMPLETED') {
      const message = `the rollout's workflow ended ${description.status.name.toLowerCase()}`;
      return {
        rollout_id: rolloutId,
        terminated: true,
        status: { code: STATUS.INTERNAL, message },
        reward: null,
        rewards: null,
        error: { type: INFRASTRUCTURE_ERROR, message },
      };
    }
    return statusOf(rolloutId, await handle.result());
  }

  /** The finished rollout's result.json, its folder and files, or null while unknown or running. */
  async result(rolloutId: string): Promise<{ result: TrialResult; dir: string; files: string[] } | null> {
    const trialName = trialNameOf(rolloutId);
    const result = await readJson<TrialResult>(jobFiles.trialResult(this.jobDir, trialName));
    if (!result) return null;
    const dir = jobFiles.trialDir(this.jobDir, trialName);
    return { result, dir, files: await listFiles(dir) };
  }

  /** The /init request's metadata (invocation, experiment, run, row ids), kept in the workflow's memo. */
  async metadata(rolloutId: string): Promise<RolloutMetadata> {
    const description = await this.client.workflow.getHandle(this.workflowId(rolloutId)).describe();
    return (description.memo?.[METADATA_MEMO] as RolloutMetadata | undefined) ?? { rollout_id: rolloutId };
  }

  private workflowId(rolloutId: string): string {
    return boundedId(`${this.jobName}/${trialNameOf(rolloutId)}`);
  }

  private taskName(request: InitRequest): string {
    if (this.taskFrom === 'row_id') return request.metadata.row_id ?? '';
    const first = request.messages?.find((m) => m.role === 'user')?.content;
    return typeof first === 'string' ? first.trim() : '';
  }
}

/**
 * The trial's folder name for a rollout id: the id itself when it is a safe file name, else a safe form plus a hash
 * (two ids must never share a folder).
 */
export function trialNameOf(rolloutId: string): string {
  const safe = sanitize(rolloutId);
  const name =
    safe === rolloutId ? safe : `${safe}-${createHash('sha256').update(rolloutId).digest('hex').slice(0, 8)}`;
  return `rollout__${name}`;
}

/**
 * Task outcomes (a wrong answer, an agent timeout) are finished rollouts; infrastructure and model API failures
 * (not scored) are errors.
 */
export function statusOf(rolloutId: string, summary: Pick<TrialSummary, 'rewards' | 'error'>): StatusResponse {
  const { rewards, error } = summary;
  const failed = error !== null && !isScored(error.type);
  return {
    rollout_id: rolloutId,
    terminated: true,
    status: failed
      ? { code: STATUS.INTERNAL, message: `${error.type}: ${error.message}` }
      : { code: STATUS.FINISHED, message: error ? `finished with ${error.type}: ${error.message}` : 'finished' },
    reward: failed ? null : (primaryReward(rewards) ?? 0),
    rewards,
    error: error ? { type: error.type, message: error.message } : null,
  };
}

async function listFiles(dir: string, prefix = ''): Promise<string[]> {
  const entries = (await ifPresent(readdir(path.join(dir, prefix), { withFileTypes: true }))) ?? [];
  const files: string[] = [];
  for (const entry of entries) {
    const relative = path.join(prefix, entry.name);
    if (entry.isDirectory()) files.push(...(await listFiles(dir, relative)));
    else if (entry.isFile()) files.push(relative);
  }
  return files.sort();
}
