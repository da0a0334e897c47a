/**
 * What a sandbox's creation waits for, whatever its provider: a slot among this worker's creations in flight toward
 * the provider (adaptive: halved when the vendor answers with a quota or rate-limit reply, grown back by one a round
 * of creations answered normally, from a small start so a job's first trials ramp up instead of bursting), then a
 * grant of the deployment's pace (`environment.creates_per_second`, shared through Temporal:
 * src/limits/creation-rate.ts). Providers without a pace are not gated.
 */
import { AdaptiveLimit } from '../limits/adaptive-limit';
import type { CreationPace } from '../limits/creation-rate';
import { CloudQuotaError } from './kit/quota';
import { observingQuotaReplies } from './kit/quota-replies';

/** The most creations in flight per provider and worker, however long the vendor keeps answering normally. */
const MAX_IN_FLIGHT = 1_024;

export interface CreationRequest {
  provider: string;
  /** The trial's pace (TrialSpec.createsPerSecond); undefined: not gated. */
  perSecond: number | undefined;
  /** Whose creation (a trial id): fairness among waiting creations. */
  owner: string;
  signal: AbortSignal;
}

export class SandboxCreation {
  private readonly inFlight = new Map<string, AdaptiveLimit>();

  /** `pace`: the deployment's shared pace; absent (no Temporal client), only this worker's creations are limited. */
  constructor(private readonly pace?: CreationPace) {}

  async create<T>({ provider, perSecond, owner, signal }: CreationRequest, create: () => Promise<T>): Promise<T> {
    if (perSecond === undefined) return create();
    const limit = this.limitOf(provider, perSecond);
    const permit = await limit.acquire(signal, owner);
    let limited = false;
    try {
      const paced = async () => {
        await this.pace?.acquire(provider, perSecond, signal);
      };
      await paced();
      const observer = {
        replied: () => {
          limited = true;
        },
        // A retry is one more creation the vendor counts: it takes a grant of the pace too.
        retrying: paced,
      };
      return await observingQuotaReplies(observer, create);
    } catch (err) {
      if (err instanceof CloudQuotaError) limited = true;
      throw err;
    } finally {
      limit.release(permit, limited);
    }
  }

  /** This worker's limit on creations in flight toward `provider`, and how many hold or wait for a slot. */
  state(provider: string): { limit: number; inFlight: number; waiting: number } | undefined {
    return this.inFlight.get(provider)?.state();
  }

  private limitOf(provider: string, perSecond: number): AdaptiveLimit {
    let limit = this.inFlight.get(provider);
    if (!limit) {
      // A second's worth to start with: more would only wait for the pace's grants.
      limit = new AdaptiveLimit({ initial: Math.max(2, Math.ceil(perSecond)), min: 1, max: MAX_IN_FLIGHT });
      this.inFlight.set(provider, limit);
    }
    return limit;
  }
}
