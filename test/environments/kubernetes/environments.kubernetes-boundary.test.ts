/**
 * A hostile agent inside a kubernetes trial pod, on a real cluster (`npm run test:k8s`; security review finding L8):
 * it finds no service-account token (even when the job names an account for the pod), no environment variables naming
 * the namespace's services, no-new-privileges set, NET_RAW and MKNOD out of its effective capabilities, and the
 * runtime's seccomp filter on; it is still root, as task images expect. The provider has put the NetworkPolicy denying
 * ingress to trial pods in the namespace (kept there afterwards, as in production); whether it is enforced depends on
 * the cluster's network plugin (scripts/k8s-cluster.sh's bridge plugin does not enforce it: docs/security.md).
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import { CoreV1Api, KubeConfig, NetworkingV1Api } from '@kubernetes/client-node';

import type { StartRequest } from '../../../src/contracts/environment';
import type { EnvironmentHandle } from '../../../src/contracts/trial';
import { KubernetesEnvironment } from '../../../src/environments/kubernetes';
import { Clusters } from '../../../src/environments/kubernetes/client';
import { TRIAL_NETWORK_POLICY, TrialNetworkPolicies } from '../../../src/environments/kubernetes/network-policy';
import type { KubernetesTarget } from './kubernetes-target';
import { ON_CLUSTER, startKubernetesTarget } from './kubernetes-target';

const run = randomBytes(3).toString('hex');
/** A Service of the trial namespace: with service links on, every pod would get ROLLOUT_LINK_<run>_SERVICE_HOST. */
const SERVICE = `rollout-link-${run}`;
const CAP_NET_RAW = 13;
const CAP_MKNOD = 27;
const CAP_CHOWN = 0;

describe(
  'kubernetes trial pod boundary (real cluster)',
  { skip: ON_CLUSTER ? false : 'needs npm run test:k8s' },
  () => {
    let dir: string;
    let target: KubernetesTarget;
    let core: CoreV1Api;
    let kubeConfig: () => KubeConfig;
    let environment: KubernetesEnvironment;
    let handle: EnvironmentHandle;
    const sh = async (command: string) => {
      const result = await environment.exec(handle, { command });
      assert.equal(result.exitCode, 0, `${command}: ${result.stderr}`);
      return result.stdout;
    };

    before(async () => {
      dir = await mkdtemp(path.join(tmpdir(), 'rollout-k8s-boundary-'));
      const started = await startKubernetesTarget({ dir, namespace: 'rollout-test' });
      if (typeof started === 'string') throw new Error(started);
      target = started;
      kubeConfig = () => {
        const config = new KubeConfig();
        config.loadFromFile(target.kubeconfig);
        return config;
      };
      core = kubeConfig().makeApiClient(CoreV1Api);
      await core.createNamespacedService({
        namespace: target.namespace,
        body: { metadata: { name: SERVICE }, spec: { ports: [{ port: 80 }], selector: { none: run } } },
      });
      environment = new KubernetesEnvironment({ hostId: 'h-k8s', deployment: `boundary-${run}`, kubeConfig });
      const request: StartRequest = {
        image: 'debian:bookworm-slim',
        jobName: `boundary-${run}`,
        trialId: `boundary-${run}/hostile`,
        trialName: 'hostile',
        workerId: 'h-k8s',
        resources: { cpus: 0.5, memoryBytes: 2 ** 28, storageBytes: 0, pidsLimit: 256 },
        env: {},
        // The namespace's own account, named on purpose: before L8 a named account got its token mounted.
        settings: { namespace: target.namespace, service_account: 'default' },
        budgetSec: 120,
        timeoutMs: 60_000,
      };
      handle = (await environment.start(request)).handle;
    });
    after(async () => {
      if (handle) await environment.remove(handle);
      await core?.deleteNamespacedService({ namespace: target.namespace, name: SERVICE });
      await target?.close();
      await rm(dir, { recursive: true, force: true });
    });

    it('finds no service-account token or its mount', async () => {
      const found = await sh(
        'ls -A /var/run/secrets/kubernetes.io/serviceaccount 2>&1; grep -c serviceaccount /proc/self/mounts || true'
      );
      assert.match(found, /No such file or directory/);
      assert.match(found, /^0$/m, found);
    });

    it("sees no service links: only the API server's own KUBERNETES_SERVICE_* / KUBERNETES_PORT*", async () => {
      const environ = (await sh("tr '\\0' '\\n' < /proc/1/environ")).split('\n').filter(Boolean);
      const names = environ.map((line) => line.slice(0, line.indexOf('=')));
      assert.ok(names.includes('KUBERNETES_SERVICE_HOST'), `the kubelet's env was read: ${names.join(' ')}`);
      const linked = names.filter((name) => /_SERVICE_(HOST|PORT)|_PORT(_\d+_(TCP|UDP|SCTP)(_\w+)?)?$/.test(name));
      assert.deepEqual(
        linked.filter((name) => !name.startsWith('KUBERNETES_')),
        [],
        'service links of the namespace'
      );
      assert.ok(!names.some((name) => name.startsWith(SERVICE.toUpperCase().replace(/-/g, '_'))));
    });

    it('runs with no-new-privileges and the seccomp filter, as root', async () => {
      const status = await sh('grep -E "^(NoNewPrivs|Seccomp):" /proc/self/status; id -u');
      assert.match(status, /^NoNewPrivs:\s+1$/m);
      assert.match(status, /^Seccomp:\s+2$/m);
      assert.match(status, /^0$/m);
    });

    it('has NET_RAW and MKNOD out of its effective capabilities (CHOWN kept), and cannot make a device node', async () => {
      const capEff = BigInt(`0x${(await sh("awk '/^CapEff:/ {print $2}' /proc/self/status")).trim()}`);
      const has = (bit: number) => (capEff >> BigInt(bit)) & 1n;
      assert.equal(has(CAP_NET_RAW), 0n, `CapEff ${capEff.toString(16)}`);
      assert.equal(has(CAP_MKNOD), 0n, `CapEff ${capEff.toString(16)}`);
      assert.equal(has(CAP_CHOWN), 1n, 'root keeps the capabilities tasks use');
      const mknod = await environment.exec(handle, { command: 'mknod /tmp/null-copy c 1 3' });
      assert.notEqual(mknod.exitCode, 0);
      assert.match(mknod.stderr, /Operation not permitted/);
    });

    it('has put the NetworkPolicy denying all ingress to trial pods in the namespace, idempotently', async () => {
      const networking = kubeConfig().makeApiClient(NetworkingV1Api);
      const policy = await networking.readNamespacedNetworkPolicy({
        namespace: target.namespace,
        name: TRIAL_NETWORK_POLICY,
      });
      assert.deepEqual(policy.spec?.policyTypes, ['Ingress']);
      assert.deepEqual(policy.spec?.ingress ?? [], [], 'no ingress rule: nothing allowed in');
      assert.deepEqual(
        policy.spec?.podSelector?.matchExpressions?.map(({ key, operator, values }) => ({ key, operator, values })),
        [{ key: 'rollout.trial', operator: 'Exists', values: undefined }]
      );
      const [pod] = await target.pods(`rollout.deployment=boundary-${run}`);
      assert.ok(pod?.metadata?.labels?.['rollout.trial'], 'the trial pod carries the label the policy selects');
      // Another worker process: the policy already there is kept, and its start goes on.
      await new TrialNetworkPolicies().ensure(new Clusters(kubeConfig).get(), target.namespace);
      const again = await networking.readNamespacedNetworkPolicy({
        namespace: target.namespace,
        name: TRIAL_NETWORK_POLICY,
      });
      assert.equal(again.metadata?.uid, policy.metadata?.uid);
    });
  }
);
