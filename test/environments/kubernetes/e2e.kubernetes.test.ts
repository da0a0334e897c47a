/**
 * Jobs on `environment: {type: kubernetes}` end to end, through the CLI, on a real cluster (`npm run test:k8s`: the
 * one KUBECONFIG points at, by default the local cluster of scripts/k8s-cluster.sh) with a real image registry.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import { stringify, parse } from 'yaml';

import { LABEL_JOB } from '../../../src/contracts/environment';
import type { TrialResult } from '../../../src/results/trial-result';
import { runCli, startCli, workspace } from '../../support/cli';
import type { KubernetesTarget } from './kubernetes-target';
import { ON_CLUSTER, startKubernetesTarget } from './kubernetes-target';
import { TEST_SERVER, testTemporal } from '../../support/temporal';
import { waitFor } from '../../support/wait';

const run = randomBytes(3).toString('hex');

/** Where the jobs run: a real cluster, with an image registry. */
type Target = KubernetesTarget;
const jobPods = (jobName: string) => (target as Target).pods(`${LABEL_JOB}=${jobName}`);

let dir: string;
let target: Target | string;
const trialResult = async (jobName: string, trial: string) =>
  JSON.parse(await readFile(path.join(dir, 'jobs', jobName, trial, 'result.json'), 'utf8')) as TrialResult;

/** job.yaml of the examples, on the target's namespace and registry. */
async function kubernetesJob(file: string, name: string, environment: Record<string, unknown> = {}): Promise<void> {
  const job = parse(await readFile(path.join(dir, 'examples', 'job.yaml'), 'utf8')) as Record<string, unknown>;
  const { namespace, registry } = target as Target;
  await writeFile(
    path.join(dir, file),
    stringify({
      ...job,
      name,
      jobs_dir: path.join(dir, 'jobs'),
      environment: { type: 'kubernetes', namespace, image_registry: registry, ...environment },
    })
  );
}

const kubeEnv = () => ({ KUBECONFIG: (target as Target).kubeconfig });

describe(
  'kubernetes jobs end to end on a real cluster',
  { skip: ON_CLUSTER ? false : 'a real cluster only (npm run test:k8s)' },
  () => {
    before(async () => {
      const { connection } = await testTemporal(); // starts the tests' Temporal server
      await connection.close();
      dir = await workspace({ examples: 'examples' });
      target = await startKubernetesTarget({
        dir,
        namespace: `rollout-e2e-${run}`,
        registryPort: TEST_SERVER.port + 9,
      });
      if (typeof target === 'string') console.log(`# not run: ${target}`);
    });
    after(async () => {
      if (typeof target !== 'string') await target.close();
    });

    it('runs the examples job on pods: rewards as on docker, images pushed to the registry, no pod left', async (t) => {
      if (typeof target === 'string') return t.skip(`not run: ${target}`);
      const name = `k8s-examples-${run}`;
      await kubernetesJob('examples/k8s.yaml', name);
      const result = await runCli(['examples/k8s.yaml'], { cwd: dir, env: kubeEnv() });
      assert.equal(result.code, 0, result.stderr);
      assert.match(result.stderr, /6\/6 done/);
      assert.deepEqual((await trialResult(name, 'hello-world__oracle__1')).rewards, { reward: 1 });
      assert.deepEqual((await trialResult(name, 'word-count__oracle__1')).rewards, { lines: 1, words: 1 });
      assert.deepEqual((await trialResult(name, 'impossible__oracle__1')).rewards, { reward: 0 });
      const greeter = await trialResult(name, 'hello-world__greeter__1');
      assert.deepEqual(greeter.rewards, { reward: 1 });
      assert.equal(greeter.environment_type, 'kubernetes');
      assert.match(greeter.image ?? '', new RegExp(`^${target.registry}/rollout-env:`));
      assert.match(
        await readFile(path.join(dir, 'jobs', name, 'hello-world__greeter__1', 'agent', 'install.txt'), 'utf8'),
        /installed greeter/
      );
      assert.deepEqual(await jobPods(name), [], 'no pod left');
    });

    it('refuses a job that would build without image_registry, before it starts, in one line per task', async (t) => {
      if (typeof target === 'string') return t.skip(`not run: ${target}`);
      const name = `k8s-refused-${run}`;
      await kubernetesJob('examples/refused.yaml', name, { image_registry: undefined });
      const result = await runCli(['examples/refused.yaml'], { cwd: dir, env: kubeEnv() });
      assert.equal(result.code, 2, result.stderr);
      assert.match(
        result.stderr,
        /error: .*hello-world\/environment\/Dockerfile: environment\.image_registry: the kubernetes environment needs an image/
      );
      assert.deepEqual(await jobPods(name), []);
    });

    it('error paths: an image that cannot be pulled, an impossible request, a pod deleted under a running trial', async (t) => {
      if (typeof target === 'string') return t.skip(`not run: ${target}`);
      const name = `k8s-errors-${run}`;
      const tasks = path.join(dir, 'error-tasks');
      const task = async (taskName: string, environment: string) => {
        await mkdir(path.join(tasks, taskName, 'tests'), { recursive: true });
        await writeFile(
          path.join(tasks, taskName, 'task.toml'),
          `version = "1.0"\n[agent]\ntimeout_sec = 120.0\n[verifier]\ntimeout_sec = 60.0\n[environment]\n${environment}\n`
        );
        await writeFile(path.join(tasks, taskName, 'instruction.md'), 'Write ok to /tmp/answer.txt.');
        await writeFile(
          path.join(tasks, taskName, 'tests', 'test.sh'),
          '[ "$(cat /tmp/answer.txt)" = ok ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n'
        );
      };
      await task('slow', 'docker_image = "debian:bookworm-slim"\ncpus = "500m"\nmemory = "256Mi"');
      await task('no-such-image', `docker_image = "rollout-no-such-image-${run}:never"`);
      await task('gpu', 'docker_image = "debian:bookworm-slim"\ngpus = 64\ncpus = "500m"\nmemory = "256Mi"');
      const { namespace, registry } = target;
      await writeFile(
        path.join(dir, 'errors.yaml'),
        stringify({
          name,
          jobs_dir: path.join(dir, 'jobs'),
          n_concurrent_trials: 3,
          environment: { type: 'kubernetes', namespace, image_registry: registry },
          agents: [{ name: 'slow', execute: 'sleep 12; echo ok > /tmp/answer.txt' }],
          datasets: [{ path: 'error-tasks' }],
        })
      );
      const cli = startCli(['errors.yaml'], { cwd: dir, env: kubeEnv() });
      // Once the slow trial's agent runs, its pod goes (as a node's loss or `kubectl delete pod` would take it).
      const trialLog = path.join(dir, 'jobs', name, 'slow__slow__1', 'trial.log');
      await waitFor('the slow trial to run its agent', async () =>
        /running agent slow/.test(await readFile(trialLog, 'utf8').catch(() => ''))
      );
      const [pod] = (await jobPods(name)).filter((p) =>
        p.metadata?.annotations?.['rollout.trial']?.endsWith('slow__slow__1')
      );
      assert.ok(pod?.metadata?.name, 'the slow trial has a pod');
      await target.deletePod(pod.metadata.name);
      const result = await cli.output;
      assert.equal(result.code, 0, result.stderr);

      const slow = await trialResult(name, 'slow__slow__1');
      assert.equal(slow.restarts, 1, 'restarted as after a lost host');
      assert.deepEqual(slow.rewards, { reward: 1 });
      assert.equal(slow.error, null);

      const pull = await trialResult(name, 'no-such-image__slow__1');
      assert.equal(pull.error?.type, 'EnvironmentStartError');
      assert.equal(pull.error?.step, 'start');
      assert.match(pull.error?.message ?? '', /image cannot be pulled/);
      assert.equal(pull.restarts, 0, 'a task error: not retried');

      const gpu = await trialResult(name, 'gpu__slow__1');
      assert.equal(gpu.error?.type, 'EnvironmentStartError');
      assert.match(gpu.error?.message ?? '', /cannot be scheduled: .*nvidia\.com\/gpu 64/);
      assert.deepEqual(await jobPods(name), [], 'no pod left');
    });
  }
);
