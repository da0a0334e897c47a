/**
 * One deployment's pace of sandbox creations on a provider (job.yaml `environment.creates_per_second`): every worker
 * asks it for time slots through the `slots` update (update-with-start, so the first ask starts it), evenly spaced
 * (src/limits/workflow/creation-slots.ts). The workflow ends after ten idle minutes and continues as new before its
 * history grows long.
 */
import { continueAsNew, defineUpdate, setHandler } from '@temporalio/workflow';

import type { SlotAsk, SlotGrant } from './creation-slots';
import { nextSlots } from './creation-slots';
import { serveUntilIdleOrLong } from './limiter-loop';

export const creationSlotsUpdate = defineUpdate<SlotGrant, [SlotAsk]>('slots');

export interface CreationPacerInput {
  perSecond: number;
  /** The latest slot handed out, carried across continue-as-new. */
  last?: number;
}

export async function creationPacerWorkflow(input: CreationPacerInput): Promise<void> {
  let last = input.last ?? 0;
  let handled = 0;
  setHandler(
    creationSlotsUpdate,
    (ask) => {
      handled += 1;
      const grant = nextSlots(last, input.perSecond, Date.now(), ask);
      last = grant.last;
      return { slots: grant.slots, grantedAt: grant.grantedAt };
    },
    {
      validator: (ask: SlotAsk) => {
        if (!(ask.count >= 1 && ask.leadMs >= 0)) throw new Error('an ask is at least one creation');
      },
    }
  );
  if (!(await serveUntilIdleOrLong(() => handled))) return;
  await continueAsNew<typeof creationPacerWorkflow>({ perSecond: input.perSecond, last });
}
