/**
 * A deployment is one Temporal server and namespace. Everything Rollout creates on a Docker host carries its
 * deployment, so a Rollout talking to another server (another user, a CI run, a test suite) on the same host never
 * takes it for its own.
 */
import { createHash } from 'node:crypto';

export function deploymentId(address: string, namespace: string): string {
  return createHash('sha256').update(`${address}\n${namespace}`).digest('hex').slice(0, 12);
}
