/**
 * A deployment-wide `max_concurrent` (a `rate_limits` rule): the share of it each holder (one worker's gateway) may
 * use. Pure: the concurrency limiter workflow (one per deployment and rule) allots from it. Holders report what they
 * use and want about every second; one that stops reporting (its worker crashed) is dropped after HOLDER_TTL_MS, and
 * what it held is free again.
 */

/** What a holder tells the limiter: calls in flight now, and how many it could use (in flight + waiting + a margin). */
export interface SlotReport {
  holder: string;
  inUse: number;
  want: number;
}

export interface SlotHolder {
  inUse: number;
  want: number;
  /** The share last allotted to it. */
  allotment: number;
  /** The share before that, which it may still apply until its next report (sent after the newer one applied). */
  applied: number;
  /** Workflow time of its last report. */
  seenAt: number;
}

/** A holder silent this long is gone (its worker crashed or was cut off): what it held is free. */
export const HOLDER_TTL_MS = 15_000;

/**
 * Max-min fair shares of `max` over the holders' wants (water-filling): a holder wanting less than an equal share gets
 * what it wants, and what it leaves is shared among the others.
 */
export function fairShares(max: number, wants: Record<string, number>): Record<string, number> {
  const order = Object.entries(wants).sort((a, b) => a[1] - b[1] || a[0].localeCompare(b[0]));
  const shares: Record<string, number> = {};
  let left = max;
  order.forEach(([holder, want], i) => {
    const share = Math.min(want, Math.floor(left / (order.length - i)));
    shares[holder] = share;
    left -= share;
  });
  return shares;
}

/**
 * Records `report` and returns the reporting holder's allotment: its fair share, but never more than what the others
 * may be using (their newest allotment, the one before it until they report again, or more while calls over a
 * reduced one finish), so the sum in flight stays within `max` at all times. A share taken from a holder reaches
 * another once the first has reported its calls ended. `holders` is mutated.
 */
export function allotSlots(holders: Record<string, SlotHolder>, max: number, report: SlotReport, now: number): number {
  for (const [id, holder] of Object.entries(holders)) if (holder.seenAt <= now - HOLDER_TTL_MS) delete holders[id];
  if (report.want <= 0 && report.inUse <= 0) {
    delete holders[report.holder];
    return 0;
  }
  const me = (holders[report.holder] ??= { inUse: 0, want: 0, allotment: 0, applied: 0, seenAt: now });
  // Reports are sequential: this one was sent after the last allotment was applied.
  Object.assign(me, {
    inUse: report.inUse,
    want: Math.max(report.want, report.inUse),
    applied: me.allotment,
    seenAt: now,
  });
  const fair = fairShares(max, Object.fromEntries(Object.entries(holders).map(([id, h]) => [id, h.want])));
  let othersHold = 0;
  for (const [id, holder] of Object.entries(holders)) {
    if (id !== report.holder) othersHold += Math.max(holder.allotment, holder.applied, holder.inUse);
  }
  me.allotment = Math.max(0, Math.min(fair[report.holder] ?? 0, max - othersHold));
  return me.allotment;
}
