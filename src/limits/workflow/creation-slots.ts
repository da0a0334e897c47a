/**
 * The schedule of a deployment's sandbox creations on one provider (job.yaml `environment.creates_per_second`): each
 * creation gets a time slot, slots evenly spaced by the pace (10% wider, so the timers' jitter cannot fit one more into
 * a second), so the vendor sees a steady stream, never a burst, however many workers create. Pure: the creation pacer
 * workflow (one per deployment, provider and pace) hands slots out from it.
 */
export interface SlotAsk {
  /** Creations waiting at the asking worker. */
  count: number;
  /** How long the asking worker takes to receive a slot (its own measure): no slot is sooner than now + lead. */
  leadMs: number;
}

export interface SlotGrant {
  /** When each creation may go, by the pacer's clock (ms since the epoch), earliest first. */
  slots: number[];
  /** The pacer's clock when it granted them: the worker measures its lead from it. */
  grantedAt: number;
}

const SPACING_MARGIN = 1.1;
/**
 * The longest lead a slot is granted with. A loaded server or host can take seconds to deliver a grant: a slot sooner
 * than that arrives already past and goes unused, and a lead capped below the delivery time let no creation through at
 * all (a chaos run at 1,200 trials made 0.8 creations a second against a pace of 200). A long lead costs only latency:
 * slots stay contiguous after the latest one handed out.
 */
const MAX_LEAD_MS = 30_000;
/** How late a slot may be taken at low paces (an eighth of its spacing, at most this). */
const MAX_LATE_LOW_PACE_MS = 25;
/** How late a slot may be taken at high paces, where the spacing margin leaves room (see lateToleranceMs). */
const MAX_LATE_HIGH_PACE_MS = 100;
/** The most creations in any second, over the pace, that lateness may cause. */
const CEILING_OVER_PACE = 1.05;

export function slotSpacingMs(perSecond: number): number {
  return (1_000 / perSecond) * SPACING_MARGIN;
}

/**
 * Slots for an ask, after `last` (the latest slot handed out, or 0): at most a second's worth per ask, so that one
 * worker does not reserve the others' turns far ahead. Returns the slots and the new `last`.
 */
export function nextSlots(last: number, perSecond: number, now: number, ask: SlotAsk): SlotGrant & { last: number } {
  const spacing = slotSpacingMs(perSecond);
  const count = Math.max(1, Math.min(ask.count, Math.ceil(perSecond)));
  const lead = Math.min(MAX_LEAD_MS, Math.max(0, ask.leadMs));
  const slots: number[] = [];
  let slot = Math.max(now + lead, last + spacing);
  for (let i = 0; i < count; i++, slot += spacing) slots.push(Math.round(slot));
  return { slots, grantedAt: now, last: slots.at(-1)! };
}

/**
 * How late a worker may still take a slot. A late slot crowds the next ones into the same second. A second holds at most
 * 1000 / spacing + 1 slots; the lateness allowed is what is left of 5% over the pace (~100 ms at 200 a second, where an
 * eighth of the spacing, under a millisecond, is less than a busy host's timer lag), and never less than an eighth of
 * the spacing (at most 25 ms) at low paces, where nothing is left.
 */
export function lateToleranceMs(perSecond: number): number {
  const spacing = slotSpacingMs(perSecond);
  const room = (perSecond * CEILING_OVER_PACE - 1_000 / spacing - 1) * spacing;
  return Math.max(Math.min(MAX_LATE_LOW_PACE_MS, spacing / 8), Math.min(MAX_LATE_HIGH_PACE_MS, room));
}
