/**
 * The NetworkPolicy that closes every trial pod of a namespace to incoming connections: nothing (another trial, a
 * hostile pod elsewhere in the cluster) may connect to an agent's sandbox. Trials only connect out (the model gateway,
 * the task's own network) and are reached through the API server's exec, which does not pass the pod network.
 * Enforced only where the cluster's network plugin implements NetworkPolicy (docs/security.md).
 */
import type { V1NetworkPolicy } from '@kubernetes/client-node';

import { LABEL_TRIAL } from '../../contracts/environment';
import type { Cluster } from './client';
import { apiMessage, isAlreadyExists } from './client';

export const TRIAL_NETWORK_POLICY = 'rollout-trials-deny-ingress';

/** Every pod carrying a trial label, ingress denied (an Ingress policy type with no rule), egress untouched. */
export function trialNetworkPolicy(namespace: string): V1NetworkPolicy {
  return {
    apiVersion: 'networking.k8s.io/v1',
    kind: 'NetworkPolicy',
    metadata: { name: TRIAL_NETWORK_POLICY, namespace },
    spec: {
      podSelector: { matchExpressions: [{ key: LABEL_TRIAL, operator: 'Exists' }] },
      policyTypes: ['Ingress'],
      ingress: [],
    },
  };
}

/** Creates the policy in each namespace once per process; one already there (another worker's) is kept. */
export class TrialNetworkPolicies {
  private readonly made = new Map<string, Promise<void>>();

  ensure(cluster: Cluster, namespace: string, context = ''): Promise<void> {
    const key = `${context}/${namespace}`;
    let made = this.made.get(key);
    if (!made) {
      made = create(cluster, namespace);
      this.made.set(key, made);
      // A failure is retried by the next trial rather than remembered.
      void made.catch(() => this.made.delete(key));
    }
    return made;
  }
}

async function create(cluster: Cluster, namespace: string): Promise<void> {
  try {
    await cluster.networking.createNamespacedNetworkPolicy({ namespace, body: trialNetworkPolicy(namespace) });
  } catch (err) {
    if (isAlreadyExists(err)) return;
    throw new Error(
      `creating NetworkPolicy ${namespace}/${TRIAL_NETWORK_POLICY} (the worker's Role needs create on networkpolicies, ` +
        `deploy/kubernetes/role.yaml): ${apiMessage(err)}`,
      { cause: err }
    );
  }
}
