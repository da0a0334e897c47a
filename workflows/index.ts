/** The workflows a Rollout worker registers (its `workflowsPath`). */
export { jobWorkflow } from './job';
export { trialWorkflow } from './trial';
export { sessionWorkflow } from './session';
export { rateLimiterWorkflow } from '../src/limits/workflow/rate-limiter';
export { budgetLedgerWorkflow } from '../src/budget/workflow/ledger';
export { concurrencyLimiterWorkflow } from '../src/limits/workflow/concurrency-limiter';
export { creationPacerWorkflow } from '../src/limits/workflow/creation-pacer';
