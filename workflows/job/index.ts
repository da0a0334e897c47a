/** The Job workflow (./workflow) and its input, as the client starts it. */
export { jobWorkflow } from './workflow';
export type { JobInput } from './state';
