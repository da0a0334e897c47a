/**
 * A job's spend against its job.yaml `budget`, kept by one workflow per job (`rollout-budget/<job>`), so it survives
 * any worker or CLI: every worker's gateway reports the spend of each trial session it serves through the `report`
 * update, cumulatively (a report repeated or overtaken by a later one changes nothing), and gets back the job's total
 * and budget. The budget is set at the job's start and by `rollout ctl <job> budget` (the `setBudget` update,
 * validated). When the spend reaches the budget, or a raised budget frees it again, the ledger signals its Job
 * workflow, which then stops (or resumes) starting trials. It ends when its job does (`close`), returning its state;
 * the next run of the job starts a new ledger from the spend the job's result.json recorded. It continues as new
 * before its history grows long.
 */
import {
  allHandlersFinished,
  condition,
  continueAsNew,
  defineQuery,
  defineSignal,
  defineUpdate,
  getExternalWorkflowHandle,
  log,
  setHandler,
  workflowInfo,
} from '@temporalio/workflow';

import type { BudgetLimits, LedgerView, SessionReport, Spend } from './spend';
import { addSpend, copySpend, emptySpend, limitReached } from './spend';

export type { LedgerView, SessionReport };

/** The ledger tells its Job workflow the budget was spent (no new trial starts) or freed again (by a raise). */
export const budgetChangedSignal = defineSignal<[{ exhausted: boolean }]>('budgetChanged');

export interface LedgerState extends LedgerView {
  byAgent: Record<string, Spend>;
}

export interface LedgerInput {
  jobWorkflowId: string;
  budget: BudgetLimits;
  /** Spent before this run (earlier runs of the job), or carried across continue-as-new. */
  spent?: Spend;
  byAgent?: Record<string, Spend>;
  sessions?: Record<string, Omit<SessionReport, 'session' | 'final'>>;
  /** Sessions that sent their final report recently: a late repeat of it must not count again. */
  closed?: string[];
  /** The exhaustion the Job workflow was last told of. */
  told?: boolean;
}

export const reportSpendUpdate = defineUpdate<LedgerView, [SessionReport[]]>('report');
export const setBudgetUpdate = defineUpdate<LedgerView, [BudgetLimits]>('setBudget');
export const ledgerStateQuery = defineQuery<LedgerState>('ledger');
/** The job ended: the ledger ends too, returning its state. */
export const closeLedgerSignal = defineSignal('close');

/** The ledger of a job (by name: every run of the job shares its spend). */
export function budgetLedgerId(jobName: string): string {
  return `rollout-budget/${jobName}`;
}

const UPDATES_PER_RUN = 2_000;
const CLOSED_KEPT = 1_000;

export function validateBudget(budget: BudgetLimits): void {
  for (const [key, value] of Object.entries(budget)) {
    if (key !== 'cost_usd' && key !== 'tokens') throw new Error(`unknown budget key "${key}": cost_usd or tokens`);
    if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0)
      throw new Error(`budget ${key} must be a positive number, got ${String(value)}`);
  }
}

export async function budgetLedgerWorkflow(input: LedgerInput): Promise<LedgerState> {
  let budget = input.budget;
  const spent = input.spent ?? emptySpend();
  const byAgent = input.byAgent ?? {};
  const sessions = input.sessions ?? {};
  const closed = input.closed ?? [];
  let told = input.told ?? false;
  let handled = 0;
  let ended = false;

  const exhausted = () => limitReached(spent, budget);
  const view = (): LedgerView => ({ budget, spent, exhausted: exhausted() });
  /** The Job hears of each change of exhaustion (best effort: a job that ended has nothing to stop). */
  const tellJob = async () => {
    const now = exhausted() !== null;
    if (now === told) return;
    try {
      await getExternalWorkflowHandle(input.jobWorkflowId).signal(budgetChangedSignal, { exhausted: now });
      told = now;
    } catch (err) {
      // Not started yet (it starts knowing, from its input) or ended: told at the next change or report.
      log.info('could not tell the job of its budget', { error: String(err) });
    }
  };

  setHandler(reportSpendUpdate, async (reports) => {
    handled += 1;
    for (const report of reports) {
      if (closed.includes(report.session)) continue;
      const before = sessions[report.session]?.spend ?? emptySpend();
      // Cumulative: only what a report adds over the last one counts (a stale one, overtaken, adds nothing).
      if (report.spend.llm_calls < before.llm_calls) continue;
      const delta = addSpend(copySpend(report.spend), before, -1);
      addSpend(spent, delta);
      addSpend((byAgent[report.agent] ??= emptySpend()), delta);
      if (report.final) {
        delete sessions[report.session];
        closed.push(report.session);
        if (closed.length > CLOSED_KEPT) closed.shift();
      } else sessions[report.session] = { agent: report.agent, spend: report.spend };
    }
    await tellJob();
    return view();
  });
  setHandler(
    setBudgetUpdate,
    async (limits) => {
      handled += 1;
      budget = limits;
      await tellJob();
      return view();
    },
    { validator: validateBudget }
  );
  setHandler(ledgerStateQuery, () => ({ ...view(), byAgent }));
  setHandler(closeLedgerSignal, () => void (ended = true));

  await condition(() => ended || handled >= UPDATES_PER_RUN || workflowInfo().continueAsNewSuggested);
  await condition(allHandlersFinished);
  if (ended) return { ...view(), byAgent };
  return continueAsNew<typeof budgetLedgerWorkflow>({
    jobWorkflowId: input.jobWorkflowId,
    budget,
    spent,
    byAgent,
    sessions,
    closed,
    told,
  });
}
