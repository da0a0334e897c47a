/**
 * Step-by-step sessions over HTTP (reset → prompt and tools; step → observation, reward, finished). The server keeps
 * no state: each session is a Session workflow, found again by its id after any restart.
 */
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';

import type { Client } from '@temporalio/client';
import type { FastifyReply } from 'fastify';
import {
  ActivityFailure,
  WithStartWorkflowOperation,
  WorkflowNotFoundError,
  WorkflowUpdateFailedError,
} from '@temporalio/client';
import { z } from 'zod';

import type { sessionWorkflow } from '../../workflows';
import {
  endSessionSignal,
  sessionClaimUpdate,
  sessionReadyUpdate,
  sessionRecordQuery,
  sessionStepUpdate,
} from '../../workflows/session/messages';
import { namedTrial } from '../api/rollout';
import { boundedId } from '../job/plan';
import { JOB_TASK_QUEUE } from '../contracts/queues';
import { RolloutJob, RolloutTask } from '../../workflows/search-attributes';
import { sessionTools } from '../trial/session-tools';
import type { SessionClaim, SessionLimits, SessionRecord, ToolCall } from '../contracts/session';
import type { TrialSpec } from '../contracts/trial';
import type { Route } from './route';
import { WarmPool } from './warm-pool';
import { InputError } from '../contracts/errors';

const ErrorSchema = z.object({ error: z.string() });
/** How long shutdown waits for a parked session to remove its container. */
const POOL_END_WAIT_MS = 30_000;
const CreateSchema = z.strictObject({
  task: z.string().min(1),
  dataset: z.string().optional(),
  /** A shorter idle timeout for this session than the server's (never a longer one). */
  idle_timeout_sec: z.number().positive().optional(),
  /** The caller's policy version (its model's weights): stamped on each step until a step sets another. */
  policy_version: z.number().int().nonnegative().optional(),
});
const StepSchema = z.strictObject({
  tool_call: z.looseObject({
    name: z.string().min(1),
    // An object, or a JSON string as OpenAI tool calls carry them.
    arguments: z.union([z.record(z.string(), z.unknown()), z.string()]).default({}),
  }),
  /** A new policy version (the trainer updated its weights): this step and the later ones carry it. */
  policy_version: z.number().int().nonnegative().optional(),
});
const IdParams = z.object({ id: z.string().min(1) });
const StepOutcomeSchema = z.object({
  observation: z.string(),
  reward: z.number(),
  finished: z.boolean(),
  info: z.record(z.string(), z.unknown()),
});

export interface SessionTask {
  spec: TrialSpec;
  instruction: string;
}

export class Sessions {
  constructor(
    private readonly client: Client,
    private readonly jobName: string,
    private readonly datasetDir: string,
    private readonly tasks: Map<string, SessionTask>,
    private readonly limits: SessionLimits,
    warmPool: Record<string, number> = {}
  ) {
    for (const task of Object.keys(warmPool)) {
      if (!tasks.has(task))
        throw new InputError([
          { file: 'rollout serve', field: `sessions.warm_pool.${task}`, message: 'no such task in the dataset' },
        ]);
    }
    this.pool = new WarmPool(
      warmPool,
      {
        start: async (task) => {
          const sessionId = randomUUID();
          const operation = this.startOperation(task, sessionId, { pooled: true });
          await this.client.workflow.start(operation.workflowTypeOrFunc, operation.options);
          return sessionId;
        },
        claim: (sessionId, claim) =>
          this.handle(sessionId)
            .executeUpdate(sessionClaimUpdate, { args: [claim] })
            .then(
              () => true,
              (err: unknown) => {
                if (err instanceof WorkflowUpdateFailedError || err instanceof WorkflowNotFoundError) return false;
                throw err;
              }
            ),
        end: async (sessionId) => {
          const handle = this.handle(sessionId);
          await handle.signal(endSessionSignal);
          await Promise.race([handle.result(), sleep(POOL_END_WAIT_MS)]);
        },
      },
      (message) => console.error(`warning: ${message}`)
    );
  }

  private readonly pool: WarmPool;

  tools() {
    return sessionTools(this.limits);
  }

  routes(): Route[] {
    return [
      {
        method: 'POST',
        path: '/sessions',
        summary: 'Start a session on a task: its container runs when this returns (prompt = the instruction)',
        body: CreateSchema,
        responses: {
          200: z.object({ session_id: z.string(), prompt: z.string(), tools: z.array(z.unknown()) }),
          400: ErrorSchema,
          503: ErrorSchema,
        },
        handler: ({ body }, reply) => this.create(body as z.infer<typeof CreateSchema>, reply),
      },
      {
        method: 'POST',
        path: '/sessions/:id/step',
        summary: 'One tool call (bash {command} or submit) → {observation, reward, finished, info}; 404 once ended',
        params: IdParams,
        body: StepSchema,
        responses: { 200: StepOutcomeSchema, 400: ErrorSchema, 404: ErrorSchema },
        handler: ({ params, body }, reply) =>
          this.step((params as { id: string }).id, body as z.infer<typeof StepSchema>, reply),
      },
      {
        method: 'GET',
        path: '/sessions/:id',
        summary: "A session's record: status, how it ended, rewards and every step so far",
        params: IdParams,
        responses: { 200: z.unknown(), 404: ErrorSchema },
        handler: async ({ params }, reply) => {
          const { id } = params as { id: string };
          return (await this.record(id)) ?? reply.code(404).send({ error: `no session "${id}"` });
        },
      },
      {
        method: 'DELETE',
        path: '/sessions/:id',
        summary: 'End a session now: its container is removed',
        params: IdParams,
        responses: { 200: z.object({ session_id: z.string(), ended: z.literal(true) }), 404: ErrorSchema },
        handler: async ({ params }, reply) => {
          const { id } = params as { id: string };
          const description = await this.handle(id)
            .describe()
            .catch((err: unknown) => {
              if (err instanceof WorkflowNotFoundError) return undefined;
              throw err;
            });
          if (description?.status.name !== 'RUNNING') {
            return reply.code(404).send({ error: `no running session "${id}"` });
          }
          await this.handle(id).signal(endSessionSignal);
          return { session_id: id, ended: true };
        },
      },
    ];
  }

  /** POST /sessions: a parked session of the task if the warm pool has one, else a new one. */
  private async create(body: z.infer<typeof CreateSchema>, reply: FastifyReply): Promise<unknown> {
    const { task, dataset, idle_timeout_sec: idle, policy_version } = body;
    if (dataset !== undefined && dataset !== this.datasetDir) {
      return reply.code(400).send({ error: `body.dataset: this server serves ${this.datasetDir} only` });
    }
    const planned = this.tasks.get(task);
    if (!planned) {
      return reply.code(400).send({
        error: `body.task: unknown task "${task}": the dataset has ${[...this.tasks.keys()].join(', ')}`,
      });
    }
    const claim = {
      ...(idle !== undefined ? { idleTimeoutSec: idle } : {}),
      ...(policy_version !== undefined ? { policyVersion: policy_version } : {}),
    };
    let sessionId = await this.pool.take(task, claim);
    if (!sessionId) {
      sessionId = randomUUID();
      try {
        await this.client.workflow.executeUpdateWithStart(sessionReadyUpdate, {
          startWorkflowOperation: this.startOperation(task, sessionId, claim),
        });
      } catch (err) {
        if (err instanceof WorkflowUpdateFailedError) {
          return reply.code(503).send({ error: `session could not start: ${causeMessage(err)}` });
        }
        throw err;
      }
    }
    return { session_id: sessionId, prompt: planned.instruction, tools: this.tools() };
  }

  /** POST /sessions/:id/step: one tool call, as the session workflow's update. */
  private async step(id: string, body: z.infer<typeof StepSchema>, reply: FastifyReply): Promise<unknown> {
    const { tool_call: raw, policy_version } = body;
    let args: Record<string, unknown>;
    try {
      args = typeof raw.arguments === 'string' ? parseArguments(raw.arguments) : raw.arguments;
    } catch (err) {
      return reply.code(400).send({ error: `body.tool_call.arguments: ${(err as Error).message}` });
    }
    const call: ToolCall = { name: raw.name, arguments: args };
    try {
      const options = policy_version !== undefined ? { policyVersion: policy_version } : undefined;
      return await this.handle(id).executeUpdate(sessionStepUpdate, { args: options ? [call, options] : [call] });
    } catch (err) {
      if (err instanceof WorkflowNotFoundError) return reply.code(404).send({ error: `no session "${id}"` });
      if (err instanceof WorkflowUpdateFailedError) {
        const message = causeMessage(err);
        // The step's activity failed (Docker unreachable, host lost): the server's side, not the request's.
        if (err.cause instanceof ActivityFailure) return reply.code(502).send({ error: message });
        return reply.code(message.startsWith('session ended') ? 404 : 400).send({ error: message });
      }
      throw err;
    }
  }

  /** Starts parked sessions for the configured warm pool. */
  startPool(): void {
    this.pool.fill();
  }

  closePool(): Promise<void> {
    return this.pool.close();
  }

  private startOperation(task: string, sessionId: string, options: SessionClaim & { pooled?: boolean }) {
    const spec = namedTrial(this.tasks.get(task)!.spec, `session__${sessionId}`);
    const idleTimeoutSec = Math.min(options.idleTimeoutSec ?? Infinity, this.limits.idleTimeoutSec);
    return new WithStartWorkflowOperation<typeof sessionWorkflow>('sessionWorkflow', {
      workflowId: spec.trialId,
      taskQueue: JOB_TASK_QUEUE,
      args: [
        {
          sessionId,
          spec,
          limits: { ...this.limits, idleTimeoutSec },
          pooled: options.pooled ?? false,
          ...(options.policyVersion !== undefined ? { policyVersion: options.policyVersion } : {}),
        },
      ],
      workflowIdConflictPolicy: 'FAIL',
      staticSummary: `session ${sessionId} · ${task}${options.pooled ? ' (warm pool)' : ''}`,
      typedSearchAttributes: [
        { key: RolloutJob, value: spec.jobName },
        { key: RolloutTask, value: task },
      ],
    });
  }

  private handle(sessionId: string) {
    return this.client.workflow.getHandle<typeof sessionWorkflow>(boundedId(`${this.jobName}/session__${sessionId}`));
  }

  private async record(sessionId: string): Promise<SessionRecord | undefined> {
    const handle = this.handle(sessionId);
    try {
      const description = await handle.describe();
      return description.status.name === 'RUNNING' ? await handle.query(sessionRecordQuery) : await handle.result();
    } catch (err) {
      if (err instanceof WorkflowNotFoundError) return undefined;
      throw err;
    }
  }
}

function parseArguments(text: string): Record<string, unknown> {
  const parsed: unknown = text.trim() === '' ? {} : JSON.parse(text);
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) throw new Error('expected a JSON object');
  return parsed as Record<string, unknown>;
}

/** The innermost cause's message: Temporal wraps a failure once per layer it crossed. */
function causeMessage(err: Error): string {
  let inner = err;
  while (inner.cause instanceof Error) inner = inner.cause;
  return inner.message;
}
