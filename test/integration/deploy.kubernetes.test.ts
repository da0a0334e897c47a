/**
 * deploy/kubernetes against a real API server (`npm run test:k8s`: scripts/k8s-cluster.sh's cluster): the kustomize
 * build passes the server's own validation (`kubectl apply --dry-run=server`), the Deployment is what the docs say
 * (2 replicas, probes on the metrics port, a pod grace period over the drain's), and the workers' RBAC is the least
 * the kubernetes provider needs (checked with `kubectl auth can-i` as the ServiceAccount, once applied).
 */
import assert from 'node:assert/strict';
import { execFile, spawnSync } from 'node:child_process';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';

import { parseAllDocuments } from 'yaml';

import { ON_CLUSTER } from '../environments/kubernetes/kubernetes-target';
import { REPO_ROOT } from '../support/temporal';

const run = promisify(execFile);
const BASE = path.join(REPO_ROOT, 'deploy', 'kubernetes');
const NAMESPACE = 'rollout';
const SERVICE_ACCOUNT = `system:serviceaccount:${NAMESPACE}:rollout-worker`;

async function kubectl(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await run('kubectl', args, { timeout: 60_000, maxBuffer: 16 * 1024 * 1024 });
    return { code: 0, stdout, stderr };
  } catch (err) {
    const failed = err as { code?: number | string; stdout?: string; stderr?: string; message: string };
    return {
      code: typeof failed.code === 'number' ? failed.code : -1,
      stdout: failed.stdout ?? '',
      stderr: failed.stderr ?? failed.message,
    };
  }
}

const skip = !ON_CLUSTER
  ? 'needs a real cluster (npm run test:k8s)'
  : spawnSync('kubectl', ['version', '--client'], { stdio: 'ignore' }).status !== 0
    ? 'needs kubectl on PATH'
    : false;

interface Manifest {
  kind: string;
  metadata: { name: string; namespace?: string };
  spec?: Record<string, unknown>;
}

describe('deploy/kubernetes on a real API server', { skip }, () => {
  let createdNamespace = false;
  let manifests: Manifest[] = [];

  before(async () => {
    const built = await kubectl('kustomize', BASE);
    assert.equal(built.code, 0, built.stderr);
    manifests = parseAllDocuments(built.stdout).map((doc) => doc.toJS() as Manifest);
    if ((await kubectl('get', 'namespace', NAMESPACE)).code !== 0) {
      const created = await kubectl('create', 'namespace', NAMESPACE);
      assert.equal(created.code, 0, created.stderr);
      createdNamespace = true;
    }
  });
  after(async () => {
    if (createdNamespace) await kubectl('delete', 'namespace', NAMESPACE, '--wait=false');
  });

  it('passes the API server validation (apply --dry-run=server)', async () => {
    const applied = await kubectl('apply', '--dry-run=server', '-k', BASE);
    assert.equal(applied.code, 0, applied.stderr);
    for (const kind of ['ServiceAccount', 'Role', 'RoleBinding', 'Deployment', 'PodDisruptionBudget', 'ConfigMap']) {
      assert.match(applied.stdout, new RegExp(`${kind.toLowerCase()}[^ ]*/`, 'i'), `${kind} applied`);
    }
  });

  it('runs two workers with probes on the metrics port and a grace period over the drain', () => {
    const deployment = manifests.find((m) => m.kind === 'Deployment');
    assert.ok(deployment);
    const spec = deployment.spec as {
      replicas: number;
      template: {
        spec: {
          serviceAccountName: string;
          terminationGracePeriodSeconds: number;
          containers: {
            args: string[];
            ports: { name: string; containerPort: number }[];
            livenessProbe: { httpGet: { path: string; port: string } };
            readinessProbe: { httpGet: { path: string; port: string } };
          }[];
        };
      };
    };
    assert.equal(spec.replicas, 2);
    const pod = spec.template.spec;
    assert.equal(pod.serviceAccountName, 'rollout-worker');
    const [worker] = pod.containers;
    const flag = (name: string) => worker!.args[worker!.args.indexOf(name) + 1];
    assert.equal(worker!.args[0], 'worker');
    const metricsPort = worker!.ports.find((port) => port.name === 'metrics')?.containerPort;
    assert.equal(String(metricsPort), flag('--metrics-port'));
    assert.equal(flag('--metrics-host'), '0.0.0.0');
    assert.deepEqual(worker!.livenessProbe.httpGet, { path: '/healthz', port: 'metrics' });
    assert.deepEqual(worker!.readinessProbe.httpGet, { path: '/readyz', port: 'metrics' });
    assert.ok(pod.terminationGracePeriodSeconds >= Number(flag('--shutdown-grace')) + 30);
  });

  it('grants the workers what the kubernetes provider needs and nothing more', async () => {
    for (const file of ['serviceaccount.yaml', 'role.yaml']) {
      const applied = await kubectl('apply', '-n', NAMESPACE, '-f', path.join(BASE, file));
      assert.equal(applied.code, 0, applied.stderr);
    }
    const can = async (...args: string[]) =>
      (await kubectl('auth', 'can-i', '--as', SERVICE_ACCOUNT, ...args)).stdout.trim();
    for (const verb of ['create', 'get', 'list', 'watch', 'delete'])
      assert.equal(await can(verb, 'pods', '-n', NAMESPACE), 'yes', verb);
    assert.equal(await can('create', 'pods', '--subresource=exec', '-n', NAMESPACE), 'yes');
    assert.equal(await can('list', 'events', '-n', NAMESPACE), 'yes');
    assert.equal(await can('create', 'networkpolicies.networking.k8s.io', '-n', NAMESPACE), 'yes');
    for (const verb of ['update', 'patch', 'delete'])
      assert.equal(await can(verb, 'networkpolicies.networking.k8s.io', '-n', NAMESPACE), 'no', verb);
    assert.equal(await can('get', 'secrets', '-n', NAMESPACE), 'no');
    assert.equal(await can('create', 'deployments', '-n', NAMESPACE), 'no');
    assert.equal(await can('create', 'pods', '-n', 'default'), 'no');
    assert.equal(await can('create', 'rolebindings', '-n', NAMESPACE), 'no');
  });
});
