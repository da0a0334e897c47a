/**
 * The gateway's side of job.yaml `budget`: each model call of a budgeted job is checked before it goes against what
 * the job has spent on all workers, and each call's spend is reported after it (cumulatively per trial session, so a
 * report repeated or lost and sent again counts once). The spend lives in the job's ledger (a Temporal workflow:
 * src/budget/ledger-client.ts); this worker keeps the ledger's last answer plus what it has not reported yet.
 *
 * Far from the budget a call is checked against that local view while it is under a second old (no round trip: the
 * added latency is a few microseconds; a budget changed live applies within that second); once less than
 * NEAR_END_SHARE of a limit is left, each call asks the ledger first, so a call that starts after the budget was spent
 * anywhere is refused.
 *
 * Each call admitted holds its conservative charge (./charge.ts) until its spend is recorded: a call is admitted only
 * while the spend plus the holds of the calls in flight here is under the budget, else it waits for them to settle.
 * So on one gateway the spend passes the budget by at most one call, at any concurrency; after ADMIT_WAIT_MS a call
 * of a trial with no other call in flight goes all the same (at most one call per running trial over the budget).
 */
import { log } from '../log';
import type { LedgerView, SessionReport, Spend } from './workflow/spend';
import { addSpend, copySpend, emptySpend, limitReached, shareLeft } from './workflow/spend';

/** Where the spend of a job is kept: the ledger of each budgeted job, by job name. */
export interface SpendLedgers {
  /** Adds the reports (cumulative per session) and returns the ledger's view after them. */
  report(jobName: string, reports: SessionReport[]): Promise<LedgerView>;
}

/** A call the gateway refused: the trial reached its agent's `limits`, or the job's `budget` is spent. */
export interface BudgetRefusal {
  kind: 'trial_limit' | 'job_budget';
  /** Which limit ("cost_usd 2.0113 of 2"). */
  reached: string;
}

/** What the agent is told, in its vendor's error shape. */
export function refusalMessage(refusal: BudgetRefusal): string {
  if (refusal.reached.startsWith(NO_PRICE)) return `rollout: ${refusal.reached}: no calls to this model`;
  return refusal.kind === 'trial_limit'
    ? `rollout: this trial reached its limit (${refusal.reached}; job.yaml agents[].limits): no more model calls`
    : `rollout: the job's budget is spent (${refusal.reached}; job.yaml budget): no more model calls`;
}

/** How a refusal of a model without a price under a cost cap begins (its cost could not be bounded). */
export const NO_PRICE = 'no price for model';

/** How long a call waits for the calls in flight to settle when their holds would pass the budget (then see admit). */
export const ADMIT_WAIT_MS = 60_000;

/** Below this share of a limit left, every call asks the ledger before it goes. */
export const NEAR_END_SHARE = 0.25;
/** A view older than this is asked for again before a call: a budget changed live applies within it. */
const VIEW_MAX_AGE_MS = 1_000;

/** One trial session's spend as this gateway knows it. */
export interface SpendSource {
  readonly sessionId: string;
  readonly agentName: string;
  spend(): Spend;
  closed(): boolean;
}

/** One budgeted job on this gateway: its ledger's last view and the sessions whose spend it has not reported. */
export class JobBudget {
  /** The conservative charge of each call in flight here, held until its spend is recorded (`release`). */
  private readonly held = new Map<number, Spend>();
  private holds = 0;
  private readonly waiters: (() => void)[] = [];
  private view: LedgerView | null = null;
  private viewAt = 0;
  private readonly dirty = new Map<string, SpendSource>();
  /** The sessions of the report in flight: their spend is in no view until it is answered. */
  private pending = new Map<string, SpendSource>();
  /** What each session had reported when the ledger last answered (its spend beyond is not in `view` yet). */
  private readonly reported = new Map<string, Spend>();
  private flushing: Promise<LedgerView> | null = null;
  private again = false;
  private failing = false;

  constructor(
    private readonly ledgers: SpendLedgers,
    private readonly jobName: string
  ) {}

  /** Null when a call may go (the spend so far is under the budget); else why not (the limit reached). */
  async check(): Promise<string | null> {
    const held = this.heldSpend();
    const local = this.view && Date.now() - this.viewAt <= VIEW_MAX_AGE_MS ? this.localSpend(this.view) : null;
    if (!this.view || !local || shareLeft(addSpend(copySpend(local), held), this.view.budget) < NEAR_END_SHARE) {
      // First call here, a view a second old, or near the end (the holds counted): the ledger's answer, after this
      // worker's reports.
      const view = await this.flush(true);
      return view.exhausted ?? limitReached(this.localSpend(view), view.budget);
    }
    return limitReached(local, this.view.budget);
  }

  /** Whether the job's budget caps cost (then a model without a price cannot be bounded: refused). */
  costCapped(): boolean {
    return this.view?.budget.cost_usd !== undefined;
  }

  /**
   * Admission of one call, atomic with its hold of `charge`: refused (the limit reached, as a sentence) once the
   * spend reached the budget; else it goes at once when nothing is held here or the spend plus the holds is under the
   * budget, or waits for calls in flight to settle. Past `waitMs` a call whose trial has no other call in flight
   * (`ownInFlight` false) goes anyway: at most one call per running trial over the budget. Returns the hold, for
   * `release` once the call's spend is recorded (or it never went).
   */
  async admit(
    charge: Spend,
    ownInFlight: () => boolean,
    gone: AbortSignal,
    waitMs = ADMIT_WAIT_MS
  ): Promise<{ reached: string } | { hold: number } | { gone: true }> {
    const deadline = Date.now() + waitMs;
    for (;;) {
      const reached = await this.check();
      if (reached) return { reached };
      if (gone.aborted) return { gone: true };
      // From here to the hold nothing awaits: every call admitted meanwhile is in `held`.
      const committed = this.localSpend(this.view!);
      const now = limitReached(committed, this.view!.budget);
      if (now) return { reached: now };
      const late = Date.now() >= deadline;
      const withHolds = addSpend(copySpend(committed), this.heldSpend());
      if (this.held.size === 0 || limitReached(withHolds, this.view!.budget) === null || (late && !ownInFlight())) {
        const hold = ++this.holds;
        this.held.set(hold, charge);
        return { hold };
      }
      await untilWoken(this.waiters, late ? 1_000 : deadline - Date.now(), gone);
    }
  }

  /** A call's spend is recorded (or it never went): its hold ends, and waiting calls look again. */
  release(hold: number): void {
    if (this.held.delete(hold)) wakeAll(this.waiters);
  }

  private heldSpend(): Spend {
    const total = emptySpend();
    for (const charge of this.held.values()) addSpend(total, charge);
    return total;
  }

  /** A session's spend changed (a call ended) or it closed: reported in the background, batched. */
  changed(source: SpendSource): void {
    this.dirty.set(source.sessionId, source);
    void this.flush(false).catch((err: unknown) => this.failed(err));
  }

  /** A report failed: kept, and sent again with the next change; said once per run of failures. */
  private failed(err: unknown): void {
    if (this.failing) return;
    this.failing = true;
    log.warn(
      `job ${this.jobName}: spend not reported to its budget ledger yet (sent again with the next call): ${String(err)}`
    );
  }

  /** Waits until every change so far is reported (a session's close). */
  async settled(): Promise<void> {
    while (this.dirty.size > 0 || this.flushing) await this.flush(false);
  }

  /** The ledger's spend plus this worker's not in it yet (changed since, or in the report under way). */
  private localSpend(view: LedgerView): Spend {
    const spend = copySpend(view.spent);
    for (const source of new Map([...this.pending, ...this.dirty]).values()) {
      addSpend(spend, source.spend());
      const reported = this.reported.get(source.sessionId);
      if (reported) addSpend(spend, reported, -1);
    }
    return spend;
  }

  /**
   * One report in flight at a time; changes meanwhile go in the next. `fresh`: the answer must come from a report
   * sent after this call (not one already under way).
   */
  private flush(fresh: boolean): Promise<LedgerView> {
    if (this.flushing) {
      if (!fresh && this.dirty.size === 0) return this.flushing;
      this.again = true;
      return this.flushing.then(() => this.flush(false));
    }
    const sources = [...this.dirty.values()];
    this.pending = new Map(this.dirty);
    this.dirty.clear();
    this.again = false;
    const reports = sources.map((source) => ({
      session: source.sessionId,
      agent: source.agentName,
      spend: source.spend(),
      final: source.closed(),
    }));
    this.flushing = this.ledgers
      .report(this.jobName, reports)
      .then(
        (view) => {
          for (const report of reports) {
            if (report.final) this.reported.delete(report.session);
            else this.reported.set(report.session, report.spend);
          }
          this.pending = new Map();
          this.view = view;
          this.viewAt = Date.now();
          this.failing = false;
          return view;
        },
        (err: unknown) => {
          // Not lost: reported again with the next change (reports are cumulative).
          this.pending = new Map();
          for (const source of sources) if (!this.dirty.has(source.sessionId)) this.dirty.set(source.sessionId, source);
          throw err;
        }
      )
      .finally(() => {
        this.flushing = null;
        if (this.again && this.dirty.size > 0) void this.flush(false).catch((err: unknown) => this.failed(err));
      });
    return this.flushing;
  }
}

/** Resolves when woken (`wakeAll` of `waiters`), after `ms`, or when `signal` aborts, whichever comes first. */
export function untilWoken(waiters: (() => void)[], ms: number, signal: AbortSignal): Promise<void> {
  return new Promise<void>((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, Math.max(0, ms));
    signal.addEventListener('abort', done, { once: true });
    waiters.push(done);
  });
}

/** Wakes every waiter (each looks again). */
export function wakeAll(waiters: (() => void)[]): void {
  for (const wake of waiters.splice(0)) wake();
}
