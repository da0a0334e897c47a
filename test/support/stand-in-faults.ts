/**
 * Faults on demand for the cloud stand-ins (`npm run stand-in -- <vendor> --faults rate=0.2`): a share of every API
 * call, whatever its kind, is answered with the vendor's own rate-limit reply, as a real account under load is.
 */
export class StandInFaults {
  private rate = 0;

  set({ rate }: { rate: number }): void {
    if (!(rate >= 0 && rate <= 1)) throw new Error(`faults: rate must be between 0 and 1, got ${rate}`);
    this.rate = rate;
  }

  /** Whether this call is answered with the rate-limit reply. */
  hit(): boolean {
    return this.rate > 0 && Math.random() < this.rate;
  }
}

/** `--faults rate=0.2` as the stand-in command takes it. */
export function parseFaults(text: string): { rate: number } {
  const match = /^rate=(\d*\.?\d+)$/.exec(text.trim());
  if (!match) throw new Error(`--faults: expected rate=<0..1> (e.g. rate=0.2), got "${text}"`);
  const rate = Number(match[1]);
  if (rate > 1) throw new Error(`--faults: rate must be between 0 and 1, got ${rate}`);
  return { rate };
}
