import type { TrialSlots } from '../activities';

/** How many recently released trials a draining worker still waits for (their result may be written here). */
const RECENT_RELEASES = 256;

/** Counts trials holding an environment on this host, up to `--max-trials`. Re-claims by the same trial are free. */
export class CountingTrialSlots implements TrialSlots {
  private readonly held = new Set<string>();
  private readonly released = new Set<string>();
  private closed = false;

  constructor(private readonly capacity: number) {}

  tryAcquire(trialId: string): boolean {
    if (this.held.has(trialId)) return true;
    if (this.closed || this.held.size >= this.capacity) return false;
    this.held.add(trialId);
    this.released.delete(trialId);
    return true;
  }

  release(trialId: string): void {
    if (!this.held.delete(trialId)) return;
    this.released.add(trialId);
    if (this.released.size > RECENT_RELEASES) this.released.delete(this.released.values().next().value!);
  }

  /**
   * Takes no new trials from now on (a worker about to leave); returns the trials it must see end first: those it
   * holds, and those that released their environment lately (their result is written on this host after cleanup).
   */
  close(): string[] {
    this.closed = true;
    return [...this.held, ...this.released];
  }
}
