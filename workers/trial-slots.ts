import type { TrialSlots } from '../activities';

/** Counts trials holding an environment on this host, up to `--max-trials`. Re-claims by the same trial are free. */
export class CountingTrialSlots implements TrialSlots {
  private readonly held = new Set<string>();

  constructor(private readonly capacity: number) {}

  tryAcquire(trialId: string): boolean {
    if (this.held.has(trialId)) return true;
    if (this.held.size >= this.capacity) return false;
    this.held.add(trialId);
    return true;
  }

  release(trialId: string): void {
    this.held.delete(trialId);
  }
}
