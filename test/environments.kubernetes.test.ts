/**
 * The kubernetes environment against the stand-in Kubernetes API server (test/support/kubernetes-stand-in.ts): real
 * containers of the local Docker engine behind its pods, @kubernetes/client-node talking to it through a kubeconfig.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, readdir, rm, writeFile, mkdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import { KubeConfig } from '@kubernetes/client-node';

import { TaskEnvironmentError } from '../src/environments/environment';
import type { StartRequest } from '../src/environments/environment';
import { KubernetesEnvironment, PodLostError } from '../src/environments/kubernetes';
import type { EnvironmentHandle } from '../src/trial/types';
import { removeAbandonedEnvironments } from '../workers/janitor';
import type { KubernetesStandIn } from './support/kubernetes-stand-in';
import { startKubernetesStandIn } from './support/kubernetes-stand-in';
import { testTemporal } from './support/temporal';

const NAMESPACE = 'rollout-test';
const IMAGE = 'debian:bookworm-slim';
const run = randomBytes(3).toString('hex');
let dir: string;
let standIn: KubernetesStandIn;
let environment: KubernetesEnvironment;

function kubeConfigOf(file: string): () => KubeConfig {
  return () => {
    const config = new KubeConfig();
    config.loadFromFile(file);
    return config;
  };
}

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

describe('kubernetes environment on the stand-in API server', () => {
  before(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'rollout-k8s-'));
    standIn = await startKubernetesStandIn({ dir, namespace: NAMESPACE });
    environment = new KubernetesEnvironment({
      hostId: 'h-k8s',
      deployment: `test-${run}`,
      kubeConfig: kubeConfigOf(standIn.kubeconfig),
    });
  });
  after(async () => {
    await standIn.close();
    await rm(dir, { recursive: true, force: true });
  });

  it('starts a pod as the spec asks (stand-in): keep-alive args, resources, deadline, labels, Never restarts', async () => {
    const { handle, unenforced } = await environment.start(
      startRequest('spec-check', {
        resources: { cpus: 0.5, memoryBytes: 2 ** 28, storageBytes: 2 ** 30, pidsLimit: 64 },
      })
    );
    try {
      const pod = standIn.pods(NAMESPACE).find((p) => handle.id === `${NAMESPACE}/${p.metadata?.name}`);
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
  });

  describe('with a running pod', () => {
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
      assert.ok(standIn.execProtocols.includes('v5.channel.k8s.io'));
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
      assert.equal(standIn.pods(NAMESPACE).length, 0);
    });
  });

  it('speaks the v4 channel protocol too (stand-in accepting only v4)', async () => {
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

  it('an image that cannot be pulled is a task error carrying the pod events (stand-in)', async () => {
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

  it('a request no node can ever hold (GPUs here) is a task error naming it, with the scheduler events (stand-in)', async () => {
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
    const pod = standIn.pods(NAMESPACE).find((p) => p.metadata?.annotations?.['rollout.trial'] === request.trialId);
    assert.equal(pod?.spec?.containers[0]?.resources?.limits?.['nvidia.com/gpu'], '1');
    await environment.removeTrial(request.trialId, { namespace: NAMESPACE });
  });

  it('an evicted or deleted pod is lost to the cluster (PodLostError, an infrastructure failure)', async () => {
    const evicted = (await environment.start(startRequest('evicted'))).handle;
    const name = evicted.id.split('/')[1]!;
    const failure = (promise: Promise<unknown>) =>
      promise.then(
        () => null,
        (err: unknown) => err
      );
    const running = failure(environment.exec(evicted, { command: 'sleep 60' }));
    await new Promise((resolve) => setTimeout(resolve, 500));
    await standIn.evict(NAMESPACE, name);
    const evictedError = await running;
    assert.ok(evictedError instanceof PodLostError && /Evicted/.test(evictedError.message), String(evictedError));
    await environment.remove(evicted);

    const deleted = (await environment.start(startRequest('deleted'))).handle;
    const sleeping = failure(environment.exec(deleted, { command: 'sleep 60' }));
    await new Promise((resolve) => setTimeout(resolve, 500));
    await standIn.deletePod(NAMESPACE, deleted.id.split('/')[1]!);
    const deletedError = await sleeping;
    assert.ok(deletedError instanceof PodLostError && /deleted/.test(deletedError.message), String(deletedError));
  });
});
