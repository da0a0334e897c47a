/** The Session workflow (./workflow) and its updates, signals and queries (./messages), as the server drives it. */
export { sessionWorkflow } from './workflow';
