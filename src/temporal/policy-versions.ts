/**
 * The job's policy version as the gateway stamps it on model calls: the `control` memo of its Job workflow (set from
 * job.yaml `policy_version` at the start, changed by `rollout ctl <job> policy-version N`), read with a describe (no
 * worker needed). A read is started when a call starts and awaited when it ends, so it adds no latency; reads for one
 * job share a round trip, and a call never takes an answer that was asked for before it started.
 */
import type { Client } from '@temporalio/client';

import type { PolicyVersions } from '../contracts/policy-versions';
import { log } from '../log';

/** The version in the Job workflow's `control` memo; its job.yaml value when the memo holds none. */
export class TemporalPolicyVersions implements PolicyVersions {
  /** Per job: the read under way, and the one to start after it (for calls that began while it was under way). */
  private readonly inFlight = new Map<string, Promise<unknown>>();
  private readonly queued = new Map<string, Promise<unknown>>();
  private failing = false;

  constructor(private readonly client: Client) {}

  async current(jobWorkflowId: string, initial: number | null): Promise<number | null> {
    const memo = await this.read(jobWorkflowId);
    const version = (memo as { control?: { policy_version?: unknown } } | undefined)?.control?.policy_version;
    return typeof version === 'number' ? version : initial;
  }

  private read(id: string): Promise<unknown> {
    // A queued read has not started yet: it answers this call too.
    const queued = this.queued.get(id);
    if (queued) return queued;
    const running = this.inFlight.get(id);
    if (!running) return this.start(id);
    const next = running
      .catch(() => undefined)
      .then(() => {
        this.queued.delete(id);
        return this.start(id);
      });
    this.queued.set(id, next);
    return next;
  }

  private start(id: string): Promise<unknown> {
    const read = this.describe(id).finally(() => {
      if (this.inFlight.get(id) === read) this.inFlight.delete(id);
    });
    this.inFlight.set(id, read);
    return read;
  }

  private async describe(id: string): Promise<unknown> {
    try {
      const description = await this.client.workflow.getHandle(id).describe();
      this.failing = false;
      return description.memo;
    } catch (err) {
      if (!this.failing)
        log.warn(`job ${id}: its policy version could not be read (calls go unstamped): ${String(err)}`);
      this.failing = true;
      throw err;
    }
  }
}
