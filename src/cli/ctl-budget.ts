/**
 * `rollout ctl <job> budget cost_usd=X tokens=Y`: the running job's budget raised or lowered, as a validated update
 * on its ledger (src/budget/workflow/ledger.ts); the keys not given keep their value. A raise lets trials start again at
 * once; a lowered budget already spent stops them as a spent one does.
 */
import type { BudgetLimits } from '../budget/workflow/spend';
import { describeSpend } from '../budget/workflow/spend';
import { InputError } from '../contracts/errors';
import { budgetLedgerId, ledgerStateQuery, setBudgetUpdate, validateBudget } from '../budget/workflow/ledger';
import { updateRunning } from './ctl-update';

export const BUDGET_CONTROL = {
  budget: {
    args: 'cost_usd=X tokens=Y',
    help: "raise or lower the job's budget (either key or both); trials start again when it is no longer spent",
  },
};

/**
 * `cost_usd=80 tokens=3e7` → the budget keys given; bad input is one line naming the command and the argument (exit
 * 2). Also `rollout resume --budget`.
 */
export function parseBudget(args: string[], command = 'rollout ctl'): BudgetLimits {
  const problem = (message: string) => new InputError([{ file: command, field: 'budget', message }]);
  if (args.length === 0) throw problem('takes cost_usd=X and/or tokens=Y');
  const budget: Record<string, number> = {};
  for (const arg of args) {
    const [key, value, ...rest] = arg.split('=');
    if (!key || value === undefined || rest.length > 0 || value.trim() === '')
      throw problem(`"${arg}" is not key=value (cost_usd=X, tokens=Y)`);
    budget[key] = Number(value);
  }
  try {
    validateBudget(budget);
    if (budget.tokens !== undefined && !Number.isInteger(budget.tokens)) throw new Error('budget tokens must be whole');
  } catch (err) {
    throw problem((err as Error).message);
  }
  return budget;
}

export async function controlBudget(job: string, change: BudgetLimits): Promise<string> {
  const missing = 'no budget ledger for this job on this Temporal server (is it running, with a job.yaml budget?)';
  const view = await updateRunning(job, budgetLedgerId(job), missing, async (handle) => {
    const { budget } = await handle.query(ledgerStateQuery);
    return handle.executeUpdate(setBudgetUpdate, { args: [{ ...budget, ...change }] });
  });
  const state = view.exhausted ? `spent (${view.exhausted}): no trial starts` : 'trials may start';
  return `job ${job}: budget ${JSON.stringify(view.budget)} · spent ${describeSpend(view.spent, view.budget)} · ${state}`;
}
