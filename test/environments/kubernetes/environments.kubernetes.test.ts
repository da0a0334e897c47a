/**
 * The kubernetes environment, @kubernetes/client-node talking through a kubeconfig to a real cluster (`npm run
 * test:k8s`: by default the local single-node cluster of scripts/k8s-cluster.sh). In `npm test`, the stand-in API
 * server (test/environments/kubernetes/kubernetes-stand-in.ts: real containers of the local Docker engine behind its pods) serves
 * only the two cases a real cluster cannot be made to produce here: an API server that speaks only the v4 exec
 * protocol (clusters before 1.30), and a kubelet's eviction (it takes real memory pressure on the node).
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, readdir, rm, writeFile, mkdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import { KubeConfig } from '@kubernetes/client-node';

import { TaskEnvironmentError } from '../../../src/contracts/environment';
import type { StartRequest } from '../../../src/contracts/environment';
import { KubernetesEnvironment, PodLostError } from '../../../src/environments/kubernetes';
import type { EnvironmentHandle } from '../../../src/contracts/trial';
import { removeAbandonedEnvironments } from '../../../workers/janitor';
import { startKubernetesStandIn } from './kubernetes-stand-in';
import type { KubernetesTarget } from './kubernetes-target';
import { ON_CLUSTER, startKubernetesTarget } from './kubernetes-target';
import { testTemporal } from '../../support/temporal';
import { waitFor } from '../../support/wait';

const IMAGE = 'debian:bookworm-slim';
const run = randomBytes(3).toString('hex');
let dir: string;
let target: KubernetesTarget;
let NAMESPACE: string;
let environment: KubernetesEnvironment;
const standInOnly = ON_CLUSTER ? 'the stand-in only: a real cluster cannot produce this case here' : false;
const clusterOnly = ON_CLUSTER
  ? false
  : 'on a real cluster (npm run test:k8s): the stand-in serves only what one cannot';

function kubeConfigOf(file: string): () => KubeConfig {
  return () => {
    const config = new KubeConfig();
    config.loadFromFile(file);
    return config;
  };
}

const failure = (promise: Promise<unknown>) =>
  promise.then(
    () => null,
    (err: unknown) => err
  );

function startRequest(name: string, overrides: Partial<StartRequest> = {}): StartRequest {
  return {
    image: IMAGE,
    jobName: `k8s-${run}`,
    trialId: `k8s-${run}/${name}`,
    trialName: name,
    workerId: 'h-k8s',
    resources: { cpus: 0.5, memoryBytes: 256 * 2 ** 20, storageBytes: 0, pidsLimit: 256 },
    env: { GREETING: 'hello from the pod' },
    settings: { namespace: NAMESPACE },
    budgetSec: 120,
    timeoutMs: 60_000,
    ...overrides,
  };
}

describe(`kubernetes environment (${ON_CLUSTER ? 'cluster' : 'stand-in API server'})`, () => {
  before(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'rollout-k8s-'));
    const started = await startKubernetesTarget({ dir, namespace: 'rollout-test' });
    if (typeof started === 'string') throw new Error(started);
    target = started;
    NAMESPACE = target.namespace;
    environment = new KubernetesEnvironment({
      hostId: 'h-k8s',
      deployment: `test-${run}`,
      kubeConfig: kubeConfigOf(target.kubeconfig),
    });
  });
  after(async () => {
    await target.close();
    await rm(dir, { recursive: true, force: true });
  });

  it(
    'starts a pod as the spec asks: keep-alive args, resources, deadline, labels, Never restarts',
    { skip: clusterOnly },
    async () => {
      const { handle, unenforced } = await environment.start(
        startRequest('spec-check', {
          resources: { cpus: 0.5, memoryBytes: 2 ** 28, storageBytes: 2 ** 30, pidsLimit: 64 },
        })
      );
      try {
        const pod = (await target.pods()).find((p) => handle.id === `${NAMESPACE}/${p.metadata?.name}`);
        assert.ok(pod, `pod of ${handle.id} listed`);
        const container = pod.spec!.containers[0]!;
        assert.equal(container.command, undefined, "the image's entrypoint is kept");
        assert.deepEqual(container.args, ['sleep', 'infinity']);
        assert.deepEqual(container.resources?.limits, {
          cpu: '500m',
          memory: `${2 ** 28}`,
          'ephemeral-storage': `${2 ** 30}`,
        });
        assert.deepEqual(container.resources?.requests, container.resources?.limits);
        assert.equal(pod.spec!.restartPolicy, 'Never');
        assert.ok((pod.spec!.activeDeadlineSeconds ?? 0) >= 120, 'deadline covers the trial budget');
        assert.equal(pod.metadata?.labels?.['rollout.deployment'], `test-${run}`);
        assert.equal(pod.metadata?.labels?.['rollout.job'], `k8s-${run}`);
        assert.equal(pod.metadata?.annotations?.['rollout.trial'], `k8s-${run}/spec-check`);
        assert.deepEqual(unenforced, ['pids']);
        assert.equal(handle.workdir, '/');
      } finally {
        await environment.remove(handle);
      }
    }
  );

  describe('with a running pod', { skip: clusterOnly }, () => {
    let handle: EnvironmentHandle;
    before(async () => {
      handle = (await environment.start(startRequest('exec'))).handle;
    });
    after(() => environment.remove(handle));

    it('execs over the websocket with the exit code from the status channel (v5), env and cwd', async () => {
      const ok = await environment.exec(handle, {
        command: 'echo "$GREETING $EXTRA"; pwd',
        cwd: '/tmp',
        env: { EXTRA: 'x y' },
      });
      assert.equal(ok.exitCode, 0);
      assert.equal(ok.stdout, 'hello from the pod x y\n/tmp\n');
      const failed = await environment.exec(handle, { command: 'echo oops >&2; exit 7' });
      assert.equal(failed.exitCode, 7);
      assert.equal(failed.stderr, 'oops\n');
    });

    it('uploads a folder and a file by tar over exec stdin', async () => {
      const source = path.join(dir, 'upload');
      await mkdir(path.join(source, 'sub'), { recursive: true });
      await writeFile(path.join(source, 'sub', 'a.txt'), 'alpha\n');
      await writeFile(path.join(dir, 'single.txt'), 'single\n');
      await environment.upload(handle, source, '/data/in');
      await environment.upload(handle, path.join(dir, 'single.txt'), '/data/one');
      const read = await environment.exec(handle, { command: 'cat /data/in/sub/a.txt /data/one/single.txt' });
      assert.equal(read.stdout, 'alpha\nsingle\n');
    });

    it('downloads only regular files and folders, never through links or outside the target (collect path safety)', async () => {
      const setup = await environment.exec(handle, {
        command: [
          'mkdir -p /logs/agent/deep && echo log > /logs/agent/deep/run.txt',
          'ln -s /etc/passwd /logs/agent/passwd-link',
          'ln -s ../../../../../tmp /logs/agent/escape',
        ].join(' && '),
      });
      assert.equal(setup.exitCode, 0, setup.stderr);
      const target = path.join(dir, 'collected');
      await mkdir(target);
      await environment.download(handle, '/logs/agent', target);
      assert.equal(await readFile(path.join(target, 'deep', 'run.txt'), 'utf8'), 'log\n');
      assert.deepEqual((await readdir(target)).sort(), ['deep']);
      // Nothing at the path: nothing collected, no error.
      await environment.download(handle, '/logs/none', target);
    });

    it('kills every process the agent started when its timeout passes, daemons included', async () => {
      const result = await environment.exec(handle, {
        command: 'nohup sleep 311 >/dev/null 2>&1 & setsid sleep 312 >/dev/null 2>&1 & sleep 313',
        timeoutMs: 1_500,
      });
      assert.equal(result.timedOut, true);
      assert.equal(result.exitCode, null);
      const left = await environment.exec(handle, { command: 'cat /proc/[0-9]*/cmdline 2>/dev/null | tr "\\0" " "' });
      assert.doesNotMatch(left.stdout, /sleep 31[123]/);
      assert.equal((await environment.exec(handle, { command: 'true' })).exitCode, 0, 'the pod is still up');
    });

    it('the janitor finds the pod by its labels and removes it once its trial is not running', async () => {
      const held = await environment.heldEnvironments();
      assert.ok(held.some((h) => h.id === handle.id && h.trialId === `k8s-${run}/exec` && h.workerId === null));
      const { client, connection } = await testTemporal();
      try {
        const removed = await removeAbandonedEnvironments(client, environment, {
          type: 'kubernetes',
          checkRunningTrials: true,
        });
        assert.ok(removed >= 1);
      } finally {
        await connection.close();
      }
      assert.equal((await environment.heldEnvironments()).length, 0);
      await waitFor(
        'the pod to be gone',
        async () => (await target.pods(`rollout.deployment=test-${run}`)).length === 0
      );
    });
  });

  it("keeps env values out of every process's argv and out of the exec URL (they go over stdin)", async () => {
    const { handle } = await environment.start(startRequest('argv'));
    try {
      const secret = `s3cret-${Date.now()}`;
      const urlsBefore = target.standIn?.execUrls.length ?? 0;
      // Another user's exec goes through su, which waits for the command: every cmdline is read while both run.
      const reader = await environment.exec(handle, {
        command:
          'sleep 5 & sleep 0.3; cat /proc/[0-9]*/cmdline 2>/dev/null | tr "\\0" " "; echo; echo "[$SECRET_TOKEN]"',
        env: { SECRET_TOKEN: secret, MULTI: 'line one\nline two' },
        user: 'nobody',
      });
      assert.equal(reader.exitCode, 0, reader.stderr);
      assert.ok(!reader.stdout.split('\n')[0]!.includes(secret), `a cmdline holds the value: ${reader.stdout}`);
      assert.match(reader.stdout, /su -s \/bin\/sh -c .*sleep 5/s, 'the cmdlines were read, su among them');
      assert.ok(reader.stdout.endsWith(`[${secret}]\n`), 'the command still sees the value');
      const asRoot = await environment.exec(handle, {
        command: 'printf "%s|%s|%s" "$(id -un)" "$MULTI" "$SECRET_TOKEN"',
        env: { MULTI: 'line one\nline two', SECRET_TOKEN: secret },
      });
      assert.equal(asRoot.stdout, `root|line one\nline two|${secret}`, asRoot.stderr);
      const urls = target.standIn?.execUrls.slice(urlsBefore) ?? [];
      if (target.standIn) assert.ok(urls.length >= 2, 'the stand-in saw the execs');
      for (const url of urls) {
        assert.ok(!decodeURIComponent(url).includes(secret), `the exec URL holds the value: ${url}`);
      }
    } finally {
      await environment.remove(handle);
    }
  });

  it('speaks the v4 channel protocol too (stand-in accepting only v4)', { skip: standInOnly }, async () => {
    const v4 = await startKubernetesStandIn({ dir, namespace: NAMESPACE, protocols: ['v4.channel.k8s.io'] });
    const old = new KubernetesEnvironment({
      hostId: 'h-k8s',
      deployment: `v4-${run}`,
      kubeConfig: kubeConfigOf(v4.kubeconfig),
    });
    try {
      const { handle } = await old.start(startRequest('v4'));
      const result = await old.exec(handle, { command: 'echo v4; exit 3' });
      assert.deepEqual([result.exitCode, result.stdout], [3, 'v4\n']);
      assert.ok(v4.execProtocols.every((p) => p === 'v4.channel.k8s.io'));
      assert.equal(await old.removeTrial(`k8s-${run}/v4`, { namespace: NAMESPACE }), 1);
    } finally {
      await v4.close();
    }
  });

  it('an image that cannot be pulled is a task error carrying the pod events', { skip: clusterOnly }, async () => {
    const missing = `rollout-k8s-missing-${run}:never`;
    await assert.rejects(environment.start(startRequest('pull', { image: missing })), (err: unknown) => {
      assert.ok(err instanceof TaskEnvironmentError, String(err));
      assert.equal(err.type, 'EnvironmentStartError');
      assert.match(err.message, /image cannot be pulled: .*ErrImagePull/);
      assert.match(err.message, /events:\n.*Failed to pull image/s);
      return true;
    });
    assert.equal(await environment.removeTrial(`k8s-${run}/pull`, { namespace: NAMESPACE }), 1);
  });

  it(
    'a request no node can ever hold (GPUs here) is a task error naming it, with the scheduler events',
    { skip: clusterOnly },
    async () => {
      const request = startRequest('gpu', {
        resources: { cpus: 1, memoryBytes: 2 ** 28, storageBytes: 0, pidsLimit: 64 },
        gpus: 1,
      });
      await assert.rejects(environment.start(request), (err: unknown) => {
        assert.ok(err instanceof TaskEnvironmentError, String(err));
        assert.match(err.message, /cannot be scheduled: it requests .*nvidia\.com\/gpu 1, more than any/);
        assert.match(err.message, /FailedScheduling: 0\/1 nodes are available: 1 Insufficient nvidia\.com\/gpu/);
        return true;
      });
      const pod = (await target.pods()).find((p) => p.metadata?.annotations?.['rollout.trial'] === request.trialId);
      assert.equal(pod?.spec?.containers[0]?.resources?.limits?.['nvidia.com/gpu'], '1');
      await environment.removeTrial(request.trialId, { namespace: NAMESPACE });
    }
  );

  /** The error of a long exec in a pod that `lose` takes away meanwhile. */
  async function execUnder(name: string, lose: (podName: string) => Promise<void>): Promise<unknown> {
    const { handle } = await environment.start(startRequest(name));
    const running = failure(environment.exec(handle, { command: 'sleep 60' }));
    await new Promise((resolve) => setTimeout(resolve, 500));
    await lose(handle.id.split('/')[1]!);
    const error = await running;
    await environment.remove(handle);
    return error;
  }

  it(
    'an evicted pod is lost to the cluster (PodLostError, an infrastructure failure)',
    { skip: standInOnly },
    async () => {
      const error = await execUnder('evicted', (pod) => target.standIn!.evict(NAMESPACE, pod));
      assert.ok(error instanceof PodLostError && /Evicted/.test(error.message), String(error));
    }
  );

  it(
    'a pod deleted under a running exec is lost to the cluster (PodLostError, an infrastructure failure)',
    { skip: clusterOnly },
    async () => {
      const error = await execUnder('deleted', (pod) => target.deletePod(pod));
      assert.ok(error instanceof PodLostError && /deleted/.test(error.message), String(error));
    }
  );

  it('no pod of these tests is left', { skip: clusterOnly }, async () => {
    await waitFor(
      'the pods to be gone',
      async () => (await target.pods(`rollout.deployment=test-${run}`)).length === 0
    );
  });
});
