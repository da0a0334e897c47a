/**
 * Shared rate limits over Temporal: per rule, one limiter workflow per deployment grants leases (workflows/
 * rate-limiter.ts); `max_concurrent` is shared by ./concurrency-limits.ts. Each worker keeps what it was granted locally for a second at most, asking for a small batch
 * (2% of the limit) only when a call finds none: the uncontended path is a local counter, and leases are used
 * within a second of their grant, so the upstream's rate follows the window's.
 */
import { createHash } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';

import type { Client } from '@temporalio/client';
import { WithStartWorkflowOperation } from '@temporalio/client';

import type { rateLimiterWorkflow } from './workflow/rate-limiter';
import { acquireRateUpdate } from './workflow/rate-limiter';
import type { SharedRateLimits } from './rules';
import type { RateLimitRule } from '../contracts/job-config';
import { JOB_TASK_QUEUE } from '../contracts/queues';

const LEASE_MS = 1_000;
const BATCH_SHARE = 0.02;
const MAX_DENIED_WAIT_MS = 2_000;

interface Lease {
  requests: number;
  tokens: number;
  expires: number;
}

export class TemporalRateLimits implements SharedRateLimits {
  private readonly leases = new Map<string, Lease>();
  /** One ask per rule in flight: calls that find no lease wait for it, in arrival order. */
  private readonly asking = new Map<string, Promise<void>>();

  constructor(
    private readonly client: Client,
    private readonly deployment: string,
    private readonly taskQueue = JOB_TASK_QUEUE
  ) {}

  async acquire(rule: RateLimitRule, tokens: number, signal: AbortSignal): Promise<void> {
    const key = ruleKey(rule);
    for (;;) {
      signal.throwIfAborted();
      const lease = this.leases.get(key);
      if (
        lease &&
        lease.expires > Date.now() &&
        lease.requests >= 1 &&
        (lease.tokens >= tokens || !rule.input_tokens_per_minute)
      ) {
        lease.requests -= 1;
        lease.tokens -= tokens;
        return;
      }
      let asking = this.asking.get(key);
      if (!asking) {
        asking = this.ask(key, rule, tokens).finally(() => this.asking.delete(key));
        this.asking.set(key, asking);
      }
      await asking;
    }
  }

  /** One batch asked for; when none is granted, a wait (bounded) before callers look again. */
  private async ask(key: string, rule: RateLimitRule, tokens: number): Promise<void> {
    const batch = Math.max(1, Math.floor((rule.requests_per_minute ?? Infinity) * BATCH_SHARE) || 1);
    const limits = {
      ...(rule.requests_per_minute !== undefined ? { requests_per_minute: rule.requests_per_minute } : {}),
      ...(rule.input_tokens_per_minute !== undefined ? { input_tokens_per_minute: rule.input_tokens_per_minute } : {}),
    };
    const workflowId = `rollout-rate-limit/${this.deployment}/${key}`;
    const grant = await this.client.workflow.executeUpdateWithStart(acquireRateUpdate, {
      args: [{ requests: batch, tokens: tokens * batch }],
      startWorkflowOperation: new WithStartWorkflowOperation<typeof rateLimiterWorkflow>('rateLimiterWorkflow', {
        workflowId,
        taskQueue: this.taskQueue,
        args: [{ limits }],
        workflowIdConflictPolicy: 'USE_EXISTING',
      }),
    });
    if (grant.requests > 0) {
      this.leases.set(key, { requests: grant.requests, tokens: grant.tokens, expires: Date.now() + LEASE_MS });
      return;
    }
    await sleep(Math.min(MAX_DENIED_WAIT_MS, Math.max(50, grant.retryAfterMs)));
  }
}

/** A limit's identity from its defining parts: the same rule in any job or worker config of the deployment is one. */
export function limitKey(parts: unknown[]): string {
  return createHash('sha256').update(JSON.stringify(parts)).digest('hex').slice(0, 16);
}

function ruleKey({ match, requests_per_minute, input_tokens_per_minute }: RateLimitRule): string {
  return limitKey([match.upstream ?? '*', match.model ?? '*', requests_per_minute, input_tokens_per_minute]);
}
