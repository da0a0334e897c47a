/**
 * Adaptive concurrency toward one upstream (AIMD, as TCP does with congestion): each call that is answered normally
 * adds 1/limit to the limit (about +1 per round of calls), and a rate-limit or overload reply halves it, once per
 * round: replies to calls sent before the last cut do not cut again. Calls over the limit wait here, first come
 * first served, so a burst of 429s settles instead of every agent hammering the upstream at once.
 */
export interface AdaptiveLimitOptions {
  initial: number;
  min: number;
  max: number;
}

export const ADAPTIVE_LIMIT_DEFAULTS: AdaptiveLimitOptions = { initial: 32, min: 1, max: 512 };

/** A call's place in the limit: returned with `release`, saying how the upstream answered. */
export interface Permit {
  readonly round: number;
}

export class CallerGoneError extends Error {
  constructor() {
    super('the caller went away while waiting for a slot');
    this.name = 'CallerGoneError';
  }
}

export class AdaptiveLimit {
  private current: number;
  private inFlight = 0;
  private round = 0;
  private readonly queue: { grant: (permit: Permit) => void }[] = [];

  constructor(private readonly options: AdaptiveLimitOptions = ADAPTIVE_LIMIT_DEFAULTS) {
    this.current = options.initial;
  }

  /** The current limit (whole calls) and how many calls hold or wait for a slot. */
  state(): { limit: number; inFlight: number; waiting: number } {
    return { limit: Math.floor(this.current), inFlight: this.inFlight, waiting: this.queue.length };
  }

  /** A slot now when one is free (no timer, no queue), else when one frees up; rejects if `signal` aborts first. */
  acquire(signal: AbortSignal): Promise<Permit> {
    if (this.queue.length === 0 && this.inFlight < Math.floor(this.current)) {
      this.inFlight += 1;
      return Promise.resolve({ round: this.round });
    }
    return new Promise<Permit>((resolve, reject) => {
      const entry = {
        grant: (permit: Permit) => {
          signal.removeEventListener('abort', onAbort);
          resolve(permit);
        },
      };
      const onAbort = () => {
        const index = this.queue.indexOf(entry);
        if (index >= 0) this.queue.splice(index, 1);
        reject(new CallerGoneError());
      };
      if (signal.aborted) return onAbort();
      signal.addEventListener('abort', onAbort, { once: true });
      this.queue.push(entry);
    });
  }

  /** Frees the slot; `limited`: the upstream answered 429, 503 or 529. */
  release(permit: Permit, limited: boolean): void {
    this.inFlight -= 1;
    const { min, max } = this.options;
    if (limited) {
      if (permit.round === this.round) {
        this.current = Math.max(min, this.current / 2);
        this.round += 1;
      }
    } else {
      this.current = Math.min(max, this.current + 1 / this.current);
    }
    while (this.queue.length > 0 && this.inFlight < Math.floor(this.current)) {
      this.inFlight += 1;
      this.queue.shift()!.grant({ round: this.round });
    }
  }
}
