/**
 * One deployment-wide `max_concurrent` (a `rate_limits` rule): every worker's gateway reports its use and gets its
 * share through the `slots` update (update-with-start, so the first report starts it); src/limits/workflow/concurrency-share.ts
 * decides. A worker that stops reporting (crashed) loses its share after a few seconds. The workflow ends after ten
 * idle minutes and continues as new before its history grows long.
 */
import { continueAsNew, defineUpdate, setHandler } from '@temporalio/workflow';

import type { SlotHolder, SlotReport } from './concurrency-share';
import { allotSlots } from './concurrency-share';
import { serveUntilIdleOrLong } from './limiter-loop';

export const reportSlotsUpdate = defineUpdate<number, [SlotReport]>('slots');

export interface ConcurrencyLimiterInput {
  maxConcurrent: number;
  /** The holders carried across continue-as-new. */
  holders?: Record<string, SlotHolder>;
}

export async function concurrencyLimiterWorkflow(input: ConcurrencyLimiterInput): Promise<void> {
  const holders = input.holders ?? {};
  let handled = 0;
  setHandler(
    reportSlotsUpdate,
    (report) => {
      handled += 1;
      return allotSlots(holders, input.maxConcurrent, report, Date.now());
    },
    {
      validator: (report: SlotReport) => {
        if (!(report.holder && report.inUse >= 0 && report.want >= 0)) throw new Error('a report names its holder');
      },
    }
  );
  if (!(await serveUntilIdleOrLong(() => handled))) return;
  await continueAsNew<typeof concurrencyLimiterWorkflow>({ maxConcurrent: input.maxConcurrent, holders });
}
