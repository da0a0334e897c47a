/**
 * Rollout's workers on a real cluster (`npm run test:k8s`: scripts/k8s-cluster.sh's single node): the image of the
 * root Dockerfile (built once per content, test/support/rollout-image.ts) loaded into the cluster, deploy/kubernetes
 * applied with its two worker replicas against the production Temporal with mTLS (temporal-cluster.sh up --tls), a
 * job submitted with --no-worker into a real object store (MinIO), and one worker pod deleted mid-job (as a rollout or
 * a scale-down does): the job completes, every trial once, no trial pod left, and the surviving worker's /metrics,
 * read by a Prometheus text-format parser, counts the trials it finished.
 */
import assert from 'node:assert/strict';
import { execFile, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';

import { LABEL_JOB } from '../../src/contracts/environment';
import type { TrialResult } from '../../src/results/trial-result';
import { runCli, startCli } from '../support/cli';
import type { TestStore } from '../support/minio';
import { startTestStore } from '../support/minio';
import { sampleSum, scrape } from '../support/prometheus';
import { rolloutImage } from '../support/rollout-image';
import { readObject, trialFolders } from '../support/store-machines';
import { REPO_ROOT, testCluster } from '../support/temporal';
import { waitFor, within } from '../support/wait';
import { ON_CLUSTER } from '../environments/kubernetes/kubernetes-target';

const exec = promisify(execFile);
const run = randomBytes(3).toString('hex');
const NAMESPACE = `rollout-workers-${run}`;
const BUCKET = `rollout-k8s-${run}`;
const JOB = `k8s-workers-${run}`;
const TASKS = 4;
const ATTEMPTS = 2;
const METRICS_PORT = 9464;
const API_PORT = process.env.ROLLOUT_KUBERNETES_API_PORT ?? '16443';
const NODE = process.env.ROLLOUT_KUBERNETES_GATEWAY_HOST ?? '';
/** The team's ROLLOUT_SECRET_KEY: the CLI signs the job's files with it, the workers check them. */
const secretKey = Buffer.alloc(32, 9).toString('base64');

async function kubectl(...args: string[]): Promise<string> {
  const { stdout } = await exec('kubectl', ['-n', NAMESPACE, ...args], { timeout: 180_000, maxBuffer: 1 << 24 });
  return stdout;
}

/** The `KEY=value` lines `temporal-cluster.sh up` prints, as an environment. */
function exported(stdout: string): Record<string, string> {
  const lines = stdout.split('\n').filter((line) => /^TEMPORAL_\w+=/.test(line));
  return Object.fromEntries(lines.map((line) => [line.slice(0, line.indexOf('=')), line.slice(line.indexOf('=') + 1)]));
}

/** The overlay a team writes: its namespace (the RoleBinding's subject with it), image, Temporal address. */
async function writeOverlay(dir: string, image: string, temporalPort: string): Promise<void> {
  const [name, tag] = image.split(':');
  const overlay = {
    apiVersion: 'kustomize.config.k8s.io/v1beta1',
    kind: 'Kustomization',
    namespace: NAMESPACE,
    resources: [path.relative(dir, path.join(REPO_ROOT, 'deploy', 'kubernetes'))],
    images: [{ name: 'rollout', newName: name, newTag: tag }],
    configMapGenerator: [
      {
        name: 'rollout-temporal',
        behavior: 'replace',
        literals: [
          `TEMPORAL_ADDRESS=${NODE}:${temporalPort}`,
          'TEMPORAL_NAMESPACE=default',
          // This cluster has no kube-proxy (scripts/k8s-cluster.sh): the API server's service address routes nowhere,
          // so in-cluster clients are given the node's (these override the kubelet's service variables).
          `KUBERNETES_SERVICE_HOST=${NODE}`,
          `KUBERNETES_SERVICE_PORT=${API_PORT}`,
        ],
      },
    ],
    patches: [
      {
        target: { kind: 'RoleBinding', name: 'rollout-trials' },
        patch: JSON.stringify([{ op: 'replace', path: '/subjects/0/namespace', value: NAMESPACE }]),
      },
    ],
  };
  await writeFile(path.join(dir, 'kustomization.yaml'), JSON.stringify(overlay, null, 2));
}

async function writeTasks(dir: string): Promise<void> {
  for (let index = 1; index <= TASKS; index++) {
    const task = path.join(dir, 'tasks', `task-${index}`);
    await mkdir(path.join(task, 'tests'), { recursive: true });
    await writeFile(
      path.join(task, 'task.toml'),
      'version = "1.0"\n[agent]\ntimeout_sec = 120.0\n[environment]\ndocker_image = "debian:bookworm-slim"\ncpus = "100m"\nmemory = "128Mi"\n'
    );
    await writeFile(path.join(task, 'instruction.md'), `Write ok to /tmp/answer.txt (task ${index}).`);
    await writeFile(
      path.join(task, 'tests', 'test.sh'),
      'if [ "$(cat /tmp/answer.txt)" = ok ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n'
    );
  }
}

interface WorkerPod {
  name: string;
  ip: string;
}

async function workerPods(): Promise<WorkerPod[]> {
  const pods = JSON.parse(await kubectl('get', 'pods', '-l', 'app=rollout-worker', '-o', 'json')) as {
    items: { metadata: { name: string; deletionTimestamp?: string }; status: { podIP?: string; phase: string } }[];
  };
  return pods.items
    .filter((pod) => pod.status.phase === 'Running' && !pod.metadata.deletionTimestamp && pod.status.podIP)
    .map((pod) => ({ name: pod.metadata.name, ip: pod.status.podIP! }));
}

/** The pods, and the workers' logs: what a failure shows. */
async function clusterState(): Promise<string> {
  const pods = await kubectl('get', 'pods', '-o', 'wide').catch((err: Error) => err.message);
  const logs = await kubectl('logs', '-l', 'app=rollout-worker', '--tail=60', '--prefix').catch(
    (err: Error) => err.message
  );
  return `pods:\n${pods}\nworker logs:\n${logs}`;
}

const metricsOf = (pod: WorkerPod) => scrape(`http://${pod.ip}:${METRICS_PORT}/metrics`);

const skip = !ON_CLUSTER
  ? 'needs a real cluster (npm run test:k8s)'
  : !NODE
    ? 'needs ROLLOUT_KUBERNETES_GATEWAY_HOST (scripts/k8s-cluster.sh up prints it)'
    : spawnSync('kubectl', ['version', '--client'], { stdio: 'ignore' }).status !== 0
      ? 'needs kubectl on PATH'
      : false;

describe('rollout workers deployed on a real cluster', { skip, timeout: 30 * 60_000 }, () => {
  let store: TestStore;
  let dir: string;
  let temporal: Record<string, string>;
  let cli: ReturnType<typeof startCli> | undefined;

  before(async () => {
    const started = Date.now();
    const image = await rolloutImage();
    console.log(`# image ${image.tag}: ${image.how} (${((Date.now() - started) / 1000).toFixed(1)} s)`);
    await exec('bash', [path.join(REPO_ROOT, 'scripts', 'k8s-cluster.sh'), 'load', image.tag], { timeout: 600_000 });
    // Pods reach this host at the node's address: the server on every address (restarted if it ran on loopback).
    await testCluster('stop', 'temporal');
    process.env.ROLLOUT_CLUSTER_IP = '0.0.0.0';
    temporal = exported(await testCluster('up', '--tls'));
    delete process.env.ROLLOUT_CLUSTER_IP;
    store = await startTestStore(NODE);
    await store.createBucket(BUCKET);
    dir = await mkdtemp(path.join(tmpdir(), 'rollout-k8s-workers-'));
    await writeOverlay(dir, image.tag, temporal.TEMPORAL_ADDRESS!.split(':')[1]!);
    await exec('kubectl', ['create', 'namespace', NAMESPACE], { timeout: 60_000 });
    const secret = [
      `--from-literal=ROLLOUT_SECRET_KEY=${secretKey}`,
      ...Object.entries({ ...store.env, AWS_ENDPOINT_URL: store.endpoint }).map(([k, v]) => `--from-literal=${k}=${v}`),
      'TEMPORAL_TLS_SERVER_CA_CERT_DATA=TEMPORAL_TLS_SERVER_CA_CERT_PATH',
      'TEMPORAL_TLS_CLIENT_CERT_DATA=TEMPORAL_TLS_CLIENT_CERT_PATH',
      'TEMPORAL_TLS_CLIENT_KEY_DATA=TEMPORAL_TLS_CLIENT_KEY_PATH',
      'TEMPORAL_TLS_SERVER_NAME=TEMPORAL_TLS_SERVER_NAME',
    ].map((arg) => {
      if (arg.startsWith('--')) return arg;
      const [key, from] = arg.split('=') as [string, string];
      return key.endsWith('_DATA') ? `--from-file=${key}=${temporal[from]}` : `--from-literal=${key}=${temporal[from]}`;
    });
    await kubectl('create', 'secret', 'generic', 'rollout-keys', ...secret);
    await kubectl('apply', '-k', dir);
    await kubectl('rollout', 'status', 'deployment/rollout-worker', '--timeout=170s');
  });

  after(async () => {
    // A job a failed test left running: cancelled, so its trials end and the workers have nothing to drain.
    if (cli && cli.exitCode === null) {
      cli.kill('SIGKILL');
      const cancel = await runCli(['cancel', JOB], { cwd: dir, env: { ...temporal, ...store.env } });
      console.log(`# rollout cancel ${JOB}: exit ${cancel.code} ${cancel.stderr.trim()}`);
    }
    // Bounded: no worker left to drain (its grace period would hold the namespace Terminating), then the namespace
    // goes with every pod in it.
    await kubectl('scale', 'deployment/rollout-worker', '--replicas=0').catch((err: Error) =>
      console.log(`# workers not scaled down: ${err.message}`)
    );
    await exec('kubectl', ['delete', 'namespace', NAMESPACE, '--timeout=170s'], { timeout: 180_000 }).catch(
      async (err: Error) => console.log(`# namespace ${NAMESPACE} not deleted: ${err.message}\n${await clusterState()}`)
    );
    await store?.stop();
    // Back to the server the other cluster tests start (plain, on loopback) at their next `up`.
    await testCluster('stop', 'temporal').catch((err) => console.log(`# ${(err as Error).message}`));
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('runs a --no-worker job on two worker replicas; one deleted mid-job: every trial once, no pod left', async () => {
    await writeTasks(dir);
    const jobYaml = [
      `name: ${JOB}`,
      `jobs_dir: s3://${BUCKET}/jobs`,
      `n_attempts: ${ATTEMPTS}`,
      `n_concurrent_trials: ${TASKS * ATTEMPTS}`,
      'environment:',
      '  type: kubernetes',
      `  namespace: ${NAMESPACE}`,
      'agents:',
      '  - name: echo',
      '    execute: sleep 15; echo ok > /tmp/answer.txt',
      'datasets:',
      '  - path: tasks',
      '',
    ];
    await writeFile(path.join(dir, 'job.yaml'), jobYaml.join('\n'));
    const env = { ...temporal, ...store.env, ROLLOUT_SECRET_KEY: secretKey };
    const job = startCli(['job.yaml', '--no-worker'], { cwd: dir, env });
    cli = job;
    let cliOutput = '';
    job.stdout?.on('data', (chunk: Buffer) => (cliOutput = (cliOutput + chunk.toString()).slice(-8000)));
    job.stderr?.on('data', (chunk: Buffer) => (cliOutput = (cliOutput + chunk.toString()).slice(-8000)));

    // Mid-job: a worker holding trial pods is deleted (SIGTERM, its grace period: it drains).
    let victim: WorkerPod | undefined;
    await waitFor(
      'a worker holding trial pods',
      async () => {
        for (const pod of await workerPods()) {
          if (sampleSum(await metricsOf(pod), 'rollout_sandboxes_held') > 0) victim = pod;
        }
        return victim !== undefined || job.exitCode !== null;
      },
      300_000
    ).catch(async (err: Error) => {
      throw new Error(`${err.message}\nCLI:\n${cliOutput}\n${await clusterState()}`);
    });
    if (!victim) {
      assert.fail(
        `no worker held a trial pod before the CLI ended (exit ${job.exitCode}):\n${cliOutput}\n${await clusterState()}`
      );
    }
    await kubectl('delete', 'pod', victim.name, '--wait=false');

    const result = await within(15 * 60_000, 'the job', job.output);
    assert.equal(result.code, 0, `${result.stdout}\n${result.stderr}\n${await clusterState()}`);
    const prefix = `jobs/${JOB}/`;
    const folders = await trialFolders(store, BUCKET, prefix);
    assert.equal(folders.size, TASKS * ATTEMPTS, [...folders.keys()].join(', '));
    const hosts = new Map<string | null, number>();
    for (const trial of folders.keys()) {
      const trialResult = JSON.parse(await readObject(store, BUCKET, `${prefix}${trial}/result.json`)) as TrialResult;
      assert.deepEqual(trialResult.rewards, { reward: 1 }, `${trial}: ${JSON.stringify(trialResult.error)}`);
      const log = await readObject(store, BUCKET, `${prefix}${trial}/trial.log`);
      assert.equal(log.match(/running agent echo/g)?.length, 1, `${trial} ran its agent once:\n${log}`);
      // The host is the worker's queue, `rollout-kubernetes@<its host id>`: the pod's name (deploy/kubernetes).
      const pod = trialResult.host?.split('@').pop() ?? null;
      hosts.set(pod, (hosts.get(pod) ?? 0) + 1);
    }
    assert.ok(hosts.has(victim.name), `the deleted worker finished what it held: ${[...hosts.keys()].join(', ')}`);
    const left = JSON.parse(await kubectl('get', 'pods', '-l', `${LABEL_JOB}=${JOB}`, '-o', 'json')) as {
      items: unknown[];
    };
    assert.equal(left.items.length, 0, 'no trial pod left');

    // A worker that ran trials all along (the replacement of the deleted one is new): its metrics count them.
    const survivors = (await workerPods()).filter((pod) => pod.name !== victim!.name && hosts.has(pod.name));
    assert.ok(survivors.length > 0, `a surviving worker ran trials: ${[...hosts.keys()].join(', ')}`);
    const metrics = await metricsOf(survivors[0]!);
    const finished = sampleSum(metrics, 'rollout_trials_finished_total', { provider: 'kubernetes', outcome: 'ok' });
    assert.equal(finished, hosts.get(survivors[0]!.name), `the trials ${survivors[0]!.name} finished`);
    assert.equal(sampleSum(metrics, 'rollout_sandboxes_held', { provider: 'kubernetes' }), 0, 'no sandbox held');
  });
});
