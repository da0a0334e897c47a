/** The creation pacer's slot arithmetic (src/limits/workflow/creation-slots.ts): pure, no server. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { lateToleranceMs, nextSlots, slotSpacingMs } from '../../src/limits/workflow/creation-slots';

describe('creation slots', () => {
  it("grants slots no sooner than the asking worker's lead, however long its grants take to arrive", () => {
    const now = 1_000_000;
    // A loaded server delivered the last grants 4 s after granting them: sooner slots would arrive already past.
    const grant = nextSlots(0, 200, now, { count: 3, leadMs: 4_000 });
    assert.equal(grant.slots[0], now + 4_000);
    assert.deepEqual(
      grant.slots.map((slot) => slot - grant.slots[0]!),
      [0, 1, 2].map((i) => Math.round(i * slotSpacingMs(200)))
    );
  });

  it('takes late slots at high paces, within 5% over the pace in any second', () => {
    for (const perSecond of [1, 5, 8, 10, 50, 200, 1_000]) {
      const late = lateToleranceMs(perSecond);
      const spacing = slotSpacingMs(perSecond);
      // The most slots one second can hold when each may be taken up to `late` after its time.
      const perSecondAtMost = Math.floor((1_000 + late) / spacing) + 1;
      assert.ok(late >= Math.min(25, spacing / 8), `${perSecond}/s: ${late} ms`);
      if (perSecond >= 50) assert.ok(late >= 50, `${perSecond}/s: ${late} ms is less than a busy host's timer lag`);
      if (perSecond >= 8) assert.ok(perSecondAtMost <= perSecond * 1.05, `${perSecond}/s: ${perSecondAtMost}`);
    }
  });
});
