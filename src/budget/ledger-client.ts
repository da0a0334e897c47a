/**
 * Budgeted jobs' spend over Temporal: one ledger workflow per job (src/budget/workflow/ledger.ts), started with the job
 * (update-with-start: a running one gets the job.yaml budget, a new one the spend the job's result.json recorded),
 * reported to by every worker's gateway, read by result writes, `rollout status` and set by `rollout ctl`.
 */
import type { Client } from '@temporalio/client';
import { WithStartWorkflowOperation } from '@temporalio/client';

import type { budgetLedgerWorkflow, LedgerState, LedgerView, SessionReport } from './workflow/ledger';
import { budgetLedgerId, ledgerStateQuery, reportSpendUpdate, setBudgetUpdate } from './workflow/ledger';
import type { SpendLedgers } from './job-budget';
import type { BudgetLimits } from './workflow/spend';
import type { JobBudgetResult } from './workflow/spend';
import { jobSpendSeen } from '../metrics/rollout-metrics';
import { JOB_TASK_QUEUE } from '../contracts/queues';
import { ifWorkflowExists } from '../workflow-not-found';

export class TemporalSpendLedgers implements SpendLedgers {
  constructor(private readonly client: Client) {}

  async report(jobName: string, reports: SessionReport[]): Promise<LedgerView> {
    const view = await this.client.workflow
      .getHandle(budgetLedgerId(jobName))
      .executeUpdate(reportSpendUpdate, { args: [reports] });
    jobSpendSeen(jobName, view.spent, view.budget);
    return view;
  }
}

/**
 * The job's ledger with this budget: the running one (a job resumed or attached to), else a new one that carries on
 * from `before` (what earlier runs of the job spent, from its result.json).
 */
export function startLedger(
  client: Client,
  job: { name: string; workflowId: string; budget: BudgetLimits },
  before: JobBudgetResult | undefined,
  taskQueue = JOB_TASK_QUEUE
): Promise<LedgerView> {
  return client.workflow.executeUpdateWithStart(setBudgetUpdate, {
    args: [job.budget],
    startWorkflowOperation: new WithStartWorkflowOperation<typeof budgetLedgerWorkflow>('budgetLedgerWorkflow', {
      workflowId: budgetLedgerId(job.name),
      taskQueue,
      args: [
        {
          jobWorkflowId: job.workflowId,
          budget: job.budget,
          ...(before ? { spent: before.spent, byAgent: before.spent_by_agent } : {}),
        },
      ],
      workflowIdConflictPolicy: 'USE_EXISTING',
      staticSummary: `Rollout budget of job ${job.name}`,
    }),
  });
}

/**
 * The ledger's state (of a running or a completed ledger), or undefined when the job has none (or its ledger was
 * terminated). A closed workflow answers a query only through a worker that replays it (with none, the query hangs
 * until the server gives up: `rollout status <job>` of a finished job); a completed ledger returned its state.
 */
export async function readLedger(client: Client, jobName: string): Promise<LedgerState | undefined> {
  const handle = client.workflow.getHandle<typeof budgetLedgerWorkflow>(budgetLedgerId(jobName));
  const description = await ifWorkflowExists(handle.describe());
  if (description?.status.name === 'COMPLETED') return handle.result();
  if (description?.status.name !== 'RUNNING') return undefined;
  return ifWorkflowExists(handle.query(ledgerStateQuery));
}

/** `rollout ctl <job> budget`: the running job's budget changed (validated by the ledger); undefined: no ledger. */
export async function setBudget(
  client: Client,
  jobName: string,
  budget: BudgetLimits
): Promise<LedgerView | undefined> {
  return ifWorkflowExists(
    client.workflow.getHandle(budgetLedgerId(jobName)).executeUpdate(setBudgetUpdate, { args: [budget] })
  );
}

/** result.json's `budget` section from the ledger's state. */
function budgetResult(state: LedgerState): JobBudgetResult {
  return { limits: state.budget, spent: state.spent, spent_by_agent: state.byAgent, exhausted: state.exhausted };
}

/** result.json's `budget` section of a job from its ledger, or undefined when it has none. */
export async function ledgerBudgetResult(client: Client, jobName: string): Promise<JobBudgetResult | undefined> {
  const ledger = await readLedger(client, jobName);
  return ledger && budgetResult(ledger);
}
