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
const MAX_LEAD_MS = 1_000;

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
