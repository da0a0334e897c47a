import { WorkflowNotFoundError } from '@temporalio/client';

/**
 * The call's value, or undefined when the workflow does not exist (`WorkflowNotFoundError`, "no such job"); any
 * other failure (the server down, a permission denied) is rethrown, never taken for a missing workflow.
 */
export async function ifWorkflowExists<T>(call: Promise<T>): Promise<T | undefined> {
  try {
    return await call;
  } catch (err) {
    if (err instanceof WorkflowNotFoundError) return undefined;
    throw err;
  }
}
