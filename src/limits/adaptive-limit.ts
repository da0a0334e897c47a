/**
 * Adaptive concurrency toward one upstream (AIMD, as TCP does with congestion): each call that is answered normally
 * adds 1/limit to the limit (about +1 per round of calls), and a rate-limit or overload reply halves it, once per
 * round: replies to calls sent before the last cut do not cut again. Calls over the limit wait here, so a burst of
 * 429s settles instead of every agent hammering the upstream at once; a freed slot goes to the waiting call whose
 * owner (its trial) holds the fewest, first come first served among equals, so one trial's parallel calls do not
 * crowd out the others'.
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
  readonly owner: string;
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
  private readonly queue: { owner: string; grant: (permit: Permit) => void }[] = [];
  /** Slots held per owner, for fairness among waiting owners. */
  private readonly held = new Map<string, number>();

  constructor(private options: AdaptiveLimitOptions = ADAPTIVE_LIMIT_DEFAULTS) {
    this.current = options.initial;
  }

  /**
   * A fixed limit of `n` from now on (a share of a deployment-wide `max_concurrent` that changed): calls in flight
   * over it finish; no new one starts until the count is under it.
   */
  resize(n: number): void {
    this.options = { initial: n, min: n, max: n };
    this.current = n;
    this.grantWaiting();
  }

  /** The current limit (whole calls) and how many calls hold or wait for a slot. */
  state(): { limit: number; inFlight: number; waiting: number } {
    return { limit: Math.floor(this.current), inFlight: this.inFlight, waiting: this.queue.length };
  }

  /**
   * A slot now when one is free (no timer, no queue), else when one frees up; rejects if `signal` aborts first.
   * `owner`: whose call it is (a trial), for fairness among waiting calls.
   */
  acquire(signal: AbortSignal, owner = ''): Promise<Permit> {
    if (this.queue.length === 0 && this.inFlight < Math.floor(this.current)) return Promise.resolve(this.take(owner));
    return new Promise<Permit>((resolve, reject) => {
      const entry = {
        owner,
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
    const held = (this.held.get(permit.owner) ?? 1) - 1;
    if (held > 0) this.held.set(permit.owner, held);
    else this.held.delete(permit.owner);
    const { min, max } = this.options;
    if (limited) {
      if (permit.round === this.round) {
        this.current = Math.max(min, this.current / 2);
        this.round += 1;
      }
    } else {
      this.current = Math.min(max, this.current + 1 / this.current);
    }
    this.grantWaiting();
  }

  private take(owner: string): Permit {
    this.inFlight += 1;
    this.held.set(owner, (this.held.get(owner) ?? 0) + 1);
    return { round: this.round, owner };
  }

  /** Free slots to waiting calls: each to the earliest call of the owner holding the fewest. */
  private grantWaiting(): void {
    while (this.queue.length > 0 && this.inFlight < Math.floor(this.current)) {
      let next = 0;
      for (let i = 1; i < this.queue.length; i++) {
        if ((this.held.get(this.queue[i]!.owner) ?? 0) < (this.held.get(this.queue[next]!.owner) ?? 0)) next = i;
      }
      const [entry] = this.queue.splice(next, 1);
      entry!.grant(this.take(entry!.owner));
    }
  }
}
