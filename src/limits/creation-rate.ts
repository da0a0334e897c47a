/**
 * Sandbox creations paced across a deployment (job.yaml `environment.creates_per_second`): per provider and pace, one
 * pacer workflow (src/limits/workflow/creation-pacer.ts) hands out evenly spaced time slots, and each creation waits for its
 * slot, so the vendor sees the pace however many workers create. Each worker queues its own creations (first come,
 * first served) and keeps one ask in flight per pace, for as many as wait: none while nothing waits. Its lead (how
 * long a slot takes to reach it) is measured on each grant, so slots are far enough ahead to be kept on a loaded host.
 */
import { setTimeout as sleep } from 'node:timers/promises';

import type { Client } from '@temporalio/client';
import { WithStartWorkflowOperation } from '@temporalio/client';

import type { creationPacerWorkflow } from './workflow/creation-pacer';
import { creationSlotsUpdate } from './workflow/creation-pacer';
import { lateToleranceMs } from './workflow/creation-slots';
import { limitKey } from './shared-rate-limits';
import { JOB_TASK_QUEUE } from '../contracts/queues';

/** Added to the slowest recent delivery of a grant, for the lead of the next ask. */
const LEAD_MARGIN_MS = 25;
const RECENT_LEADS = 8;

interface Waiter {
  go: () => void;
}

/** The deployment's pace of creations: resolves when one more may start (rejects if `signal` aborts first). */
export interface CreationPace {
  acquire(provider: string, perSecond: number, signal: AbortSignal): Promise<void>;
}

export class TemporalCreationRate implements CreationPace {
  private readonly queues = new Map<string, Waiter[]>();
  private readonly pumping = new Set<string>();
  /** Recent deliveries of grants (ms from the pacer's clock to this worker's), per pace. */
  private readonly leads = new Map<string, number[]>();

  constructor(
    private readonly client: Client,
    private readonly deployment: string,
    private readonly taskQueue = JOB_TASK_QUEUE
  ) {}

  acquire(provider: string, perSecond: number, signal: AbortSignal): Promise<void> {
    const key = `${provider}-${limitKey([provider, perSecond])}`;
    const queue = this.queues.get(key) ?? [];
    this.queues.set(key, queue);
    const granted = new Promise<void>((resolve, reject) => {
      const waiter: Waiter = {
        go: () => {
          signal.removeEventListener('abort', onAbort);
          resolve();
        },
      };
      const onAbort = () => {
        const index = queue.indexOf(waiter);
        if (index >= 0) queue.splice(index, 1);
        reject(signal.reason instanceof Error ? signal.reason : new Error('the creation was cancelled'));
      };
      if (signal.aborted) return onAbort();
      signal.addEventListener('abort', onAbort, { once: true });
      queue.push(waiter);
    });
    if (!this.pumping.has(key)) {
      this.pumping.add(key);
      void this.pump(key, provider, perSecond, queue).finally(() => this.pumping.delete(key));
    }
    return granted;
  }

  /** Asks for slots while creations wait here; each slot goes, at its time, to the earliest waiter then. */
  private async pump(key: string, provider: string, perSecond: number, queue: Waiter[]): Promise<void> {
    while (queue.length > 0) {
      let slots: number[];
      try {
        const leads = this.leads.get(key) ?? [];
        const grant = await this.ask(key, perSecond, queue.length, Math.max(0, ...leads) + LEAD_MARGIN_MS);
        this.leads.set(key, [...leads, Date.now() - grant.grantedAt].slice(-RECENT_LEADS));
        slots = grant.slots;
      } catch (err) {
        // The server unreachable (restarting): creations wait on, each bounded by its step's cancellation.
        console.error(`creation pace of ${provider}: no slot (asking again in a second): ${String(err)}`);
        await sleep(1_000);
        continue;
      }
      const tolerance = lateToleranceMs(perSecond);
      for (const slot of slots) {
        // A slot that came too late (the host slower than its lead said) goes unused: taken now, it would crowd the
        // next one's second. So does a slot whose creation was cancelled meanwhile: the pace is a ceiling.
        if (Date.now() > slot + tolerance) continue;
        await sleep(Math.max(0, slot - Date.now()));
        // The timer itself may fire late on a busy host.
        if (Date.now() > slot + tolerance) continue;
        queue.shift()?.go();
      }
    }
  }

  private ask(key: string, perSecond: number, count: number, leadMs: number) {
    return this.client.workflow.executeUpdateWithStart(creationSlotsUpdate, {
      args: [{ count, leadMs: Math.round(leadMs) }],
      startWorkflowOperation: new WithStartWorkflowOperation<typeof creationPacerWorkflow>('creationPacerWorkflow', {
        workflowId: `rollout-creation-pace/${this.deployment}/${key}`,
        taskQueue: this.taskQueue,
        args: [{ perSecond }],
        workflowIdConflictPolicy: 'USE_EXISTING',
      }),
    });
  }
}
