/**
 * A trial's pod manifest denies by default (security review finding L8): no service-account token even when the
 * operator names an account, no service links, no privilege escalation, Docker's dropped capabilities, the runtime's
 * seccomp profile. What a pod really gets from these is checked on a real cluster in environments.kubernetes.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import type { StartRequest } from '../../src/contracts/environment';
import { podManifest } from '../../src/environments/kubernetes/pod-spec';
import { KubernetesSettingsSchema } from '../../src/environments/kubernetes/settings';
import { DROPPED_CAPABILITIES } from '../../src/environments/trial-container';

const request: StartRequest = {
  image: 'debian:bookworm-slim',
  jobName: 'job',
  trialId: 'job/trial',
  trialName: 'trial',
  workerId: 'w',
  resources: { cpus: 1, memoryBytes: 2 ** 28, storageBytes: 0, pidsLimit: 64 },
  env: {},
  settings: {},
  budgetSec: 60,
  timeoutMs: 60_000,
};

const manifest = (settings: Record<string, unknown>) =>
  podManifest(request, KubernetesSettingsSchema.parse({ namespace: 'trials', ...settings }), 'pod', 'deployment');

describe('kubernetes trial pod spec', () => {
  it('mounts no service-account token and injects no service links, whatever the settings', () => {
    for (const settings of [{}, { service_account: 'trial-identity' }]) {
      const spec = manifest(settings).spec!;
      assert.equal(spec.automountServiceAccountToken, false, JSON.stringify(settings));
      assert.equal(spec.enableServiceLinks, false);
    }
    assert.equal(manifest({ service_account: 'trial-identity' }).spec!.serviceAccountName, 'trial-identity');
  });

  it("gives the container Docker's guarantees: no escalation, NET_RAW and MKNOD dropped, RuntimeDefault seccomp", () => {
    const spec = manifest({ runtime_class: 'gvisor' }).spec!;
    assert.deepEqual(spec.securityContext, { seccompProfile: { type: 'RuntimeDefault' } });
    assert.equal(spec.hostNetwork, undefined);
    assert.equal(spec.hostPID, undefined);
    assert.equal(spec.hostIPC, undefined);
    assert.equal(spec.shareProcessNamespace, undefined);
    assert.equal(spec.containers.length, 1);
    const context = spec.containers[0]!.securityContext!;
    assert.equal(context.allowPrivilegeEscalation, false);
    assert.equal(context.privileged, false);
    assert.deepEqual(context.capabilities, { drop: ['NET_RAW', 'MKNOD'] });
    assert.deepEqual([...DROPPED_CAPABILITIES], ['NET_RAW', 'MKNOD']);
    assert.deepEqual(context.seccompProfile, { type: 'RuntimeDefault' });
  });
});
