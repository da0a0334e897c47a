/** The Trial workflow (./workflow). */
export { trialWorkflow } from './workflow';
