/**
 * Deployment-wide `max_concurrent` over Temporal: per rule, one limiter workflow per deployment (workflows/
 * concurrency-limiter.ts) shares the limit among the workers' gateways. Each gateway holds its share as a local limit
 * (calls within it start at once, fairly across trials), reports its use about every second while busy (more often
 * while calls wait for more than it holds), and gives its share back after a few idle seconds. A gateway that cannot
 * report for HOLDER_TTL_MS / 2 starts nothing more: by then the limiter may have handed its share to others.
 */
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';

import type { Client } from '@temporalio/client';
import { WithStartWorkflowOperation } from '@temporalio/client';

import type { concurrencyLimiterWorkflow } from './workflow/concurrency-limiter';
import { reportSlotsUpdate } from './workflow/concurrency-limiter';
import { AdaptiveLimit } from './adaptive-limit';
import { HOLDER_TTL_MS } from './workflow/concurrency-share';
import type { RateLimitRule } from '../contracts/job-config';
import { log } from '../log';
import type { SharedConcurrency } from './rules';
import { JOB_TASK_QUEUE } from '../contracts/queues';
import { limitKey } from './shared-rate-limits';

/** How often a busy holder reports; while calls wait for more than it holds, the faster pace. */
const REPORT_MS = 1_000;
const REPORT_WAITING_MS = 250;
/** A holder idle this long gives its share back (its next call asks again: one round trip). */
const IDLE_RELEASE_MS = 5_000;
/** Slots asked beyond those in use and waiting, so a few more calls start without a round trip. */
const MARGIN_SHARE = 0.1;

interface Share {
  readonly limit: AdaptiveLimit;
  readonly max: number;
  readonly workflowId: string;
  lastBusy: number;
  lastReported: number;
  wake: () => void;
}

export class TemporalConcurrencyShares implements SharedConcurrency {
  private readonly shares = new Map<string, Share>();
  private closed = false;

  constructor(
    private readonly client: Client,
    private readonly deployment: string,
    private readonly taskQueue = JOB_TASK_QUEUE,
    private readonly holder = `${hostname()}/${process.pid}/${randomBytes(4).toString('hex')}`
  ) {}

  /** This gateway's share of the rule's deployment-wide `max_concurrent`, as a local limit kept up to date. */
  limitFor(rule: RateLimitRule & { max_concurrent: number }): AdaptiveLimit {
    const key = limitKey(['max_concurrent', rule.match.upstream ?? '*', rule.match.model ?? '*', rule.max_concurrent]);
    let share = this.shares.get(key);
    if (!share) {
      share = {
        limit: new AdaptiveLimit({ initial: 0, min: 0, max: 0 }),
        max: rule.max_concurrent,
        workflowId: `rollout-concurrency-limit/${this.deployment}/${key}`,
        lastBusy: Date.now(),
        lastReported: Date.now(),
        wake: () => undefined,
      };
      this.shares.set(key, share);
      void this.keep(share);
    }
    share.lastBusy = Date.now();
    // Once the call has asked for its slot: a share given back, or calls waiting, needs a report now.
    const current = share;
    setImmediate(() => {
      if (current.limit.state().waiting > 0) current.wake();
    });
    return share.limit;
  }

  /** Gives every share back (best effort: the limiter drops a silent holder anyway). */
  async close(): Promise<void> {
    this.closed = true;
    for (const share of this.shares.values()) share.wake();
    await Promise.all(
      [...this.shares.values()].map((share) =>
        this.report(share, 0, 0).catch((err: unknown) =>
          log.warn(`could not give back a max_concurrent share (${share.workflowId}): ${String(err)}`)
        )
      )
    );
  }

  /** Reports and applies the allotment, for as long as the gateway runs. */
  private async keep(share: Share): Promise<void> {
    while (!this.closed) {
      const { inFlight, waiting } = share.limit.state();
      if (inFlight + waiting > 0) share.lastBusy = Date.now();
      const idle = Date.now() - share.lastBusy > IDLE_RELEASE_MS;
      const margin = Math.max(1, Math.ceil(share.max * MARGIN_SHARE));
      const want = idle ? 0 : Math.min(share.max, inFlight + waiting + margin);
      const reporting = Date.now();
      try {
        share.limit.resize(await this.report(share, inFlight, want));
        share.lastReported = reporting;
      } catch (err) {
        log.warn(`could not report to the max_concurrent limiter ${share.workflowId}: ${String(err)}`);
        if (Date.now() - share.lastReported > HOLDER_TTL_MS / 2) share.limit.resize(0);
      }
      const woken = new Promise<void>((resolve) => (share.wake = resolve));
      if (want > 0) {
        const starved = share.limit.state().waiting > 0;
        await Promise.race([woken, sleep(starved ? REPORT_WAITING_MS : REPORT_MS, undefined, { ref: false })]);
      } else {
        await woken;
      }
      // Reports at most this often, however many calls arrive.
      await sleep(Math.max(0, reporting + REPORT_WAITING_MS - Date.now()), undefined, { ref: false });
    }
  }

  private report(share: Share, inUse: number, want: number): Promise<number> {
    return this.client.workflow.executeUpdateWithStart(reportSlotsUpdate, {
      args: [{ holder: this.holder, inUse, want }],
      startWorkflowOperation: new WithStartWorkflowOperation<typeof concurrencyLimiterWorkflow>(
        'concurrencyLimiterWorkflow',
        {
          workflowId: share.workflowId,
          taskQueue: this.taskQueue,
          args: [{ maxConcurrent: share.max }],
          workflowIdConflictPolicy: 'USE_EXISTING',
        }
      ),
    });
  }
}
