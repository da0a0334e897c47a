/** The workflows a Rollout worker registers (its `workflowsPath`). */
export { jobWorkflow } from './job';
export { trialWorkflow } from './trial';
export { sessionWorkflow } from './session';
export { rateLimiterWorkflow } from './rate-limiter';
export { budgetLedgerWorkflow } from '../src/budget/workflow/ledger';
export { concurrencyLimiterWorkflow } from './concurrency-limiter';
export { creationPacerWorkflow } from './creation-pacer';
