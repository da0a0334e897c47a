/**
 * A built-in agent (claude-code) in a pod of a real cluster (`npm run test:k8s`), through the CLI: installed from npm
 * inside the pod, run against the scripted model server (the stand-in for vendor APIs, on 127.0.0.1, which pods
 * cannot reach) through the worker's model gateway, which pods reach at ROLLOUT_KUBERNETES_GATEWAY_HOST (the local
 * cluster's node address, printed by `scripts/k8s-cluster.sh up`). The local cluster adds no NAT rule to the host,
 * so its pods go out only through a forward proxy on that address (the task's HTTP(S)_PROXY, as behind a corporate
 * proxy). The verifier greps every process's environment and the pod's whole filesystem for the real key.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import { stringify } from 'yaml';

import { LABEL_JOB } from '../../../src/contracts/environment';
import { GATEWAY_HOST_VARIABLE } from '../../../src/environments/kubernetes';
import type { TrialResult } from '../../../src/results/trial-result';
import type { CliRun } from '../../support/cli';
import { runCli, workspace } from '../../support/cli';
import type { EgressProxy } from '../../support/egress-proxy';
import { startEgressProxy } from '../../support/egress-proxy';
import type { KubernetesTarget } from './kubernetes-target';
import { ON_CLUSTER, startKubernetesTarget } from './kubernetes-target';
import type { ScriptedModelServer } from '../../support/scripted-model-server';
import { startScriptedModelServer } from '../../support/scripted-model-server';
import { TEST_SERVER, testTemporal } from '../../support/temporal';
import { writeKeyProbe } from '../../support/gateway-agent';

const jobName = `k8s-agent-${randomBytes(3).toString('hex')}`;
const KEY = `sk-real-${randomBytes(12).toString('hex')}`;
const JOB_TIMEOUT_MS = 20 * 60_000;
const gatewayHost = process.env[GATEWAY_HOST_VARIABLE];
const notRun = !ON_CLUSTER
  ? 'a real cluster only (npm run test:k8s)'
  : !gatewayHost
    ? `${GATEWAY_HOST_VARIABLE} (the address at which pods reach this host) is not set`
    : null;

describe('claude-code in a pod of a real cluster, through the model gateway', { skip: notRun ?? false }, () => {
  let dir: string;
  let target: KubernetesTarget;
  let scripted: ScriptedModelServer;
  let proxy: EgressProxy;
  let run: CliRun;
  const trial = async () =>
    JSON.parse(
      await readFile(path.join(dir, 'jobs', jobName, 'hello-world__claude-code__1', 'result.json'), 'utf8')
    ) as TrialResult;

  before(
    async () => {
      const { connection } = await testTemporal(); // starts the tests' Temporal server
      await connection.close();
      dir = await workspace({ 'tasks/hello-world': 'examples/tasks/hello-world' });
      const started = await startKubernetesTarget({ dir, namespace: 'default', registryPort: TEST_SERVER.port + 8 });
      if (typeof started === 'string') throw new Error(started);
      target = started;
      scripted = await startScriptedModelServer({ host: '127.0.0.1', port: 0 });
      scripted.session('claude-code', {
        turns: [{ shell: "printf 'Hello, world!' > /app/hello.txt" }, { say: 'done' }],
      });
      proxy = await startEgressProxy(gatewayHost!);
      const task = path.join(dir, 'tasks', 'hello-world');
      await writeKeyProbe(task, KEY);
      const proxies = Object.entries({
        HTTP_PROXY: proxy.url,
        HTTPS_PROXY: proxy.url,
        http_proxy: proxy.url,
        https_proxy: proxy.url,
        NO_PROXY: gatewayHost!,
        no_proxy: gatewayHost!,
      })
        .map(([name, value]) => `${name} = "${value}"`)
        .join(', ');
      const toml = await readFile(path.join(task, 'task.toml'), 'utf8');
      await writeFile(
        path.join(task, 'task.toml'),
        toml.replace('[environment]\n', `[environment]\nenv = { ${proxies} }\n`)
      );
      await writeFile(
        path.join(dir, 'job.yaml'),
        stringify({
          name: jobName,
          jobs_dir: 'jobs',
          // npm install and Node's start-up in a pod on a loaded 2-core host: the task's 60 s would be tight.
          timeout_multiplier: 6,
          environment: {
            type: 'kubernetes',
            namespace: target.namespace,
            image_registry: target.registry,
            override_memory: '2Gi',
          },
          agents: [
            {
              name: 'claude-code',
              model: 'scripted-model',
              env: { ANTHROPIC_BASE_URL: `${scripted.url}/s/claude-code`, ANTHROPIC_API_KEY: '${ROLLOUT_TEST_KEY}' },
            },
          ],
          datasets: [{ path: 'tasks' }],
        })
      );
      run = await runCli(['job.yaml'], {
        cwd: dir,
        env: { ROLLOUT_TEST_KEY: KEY, KUBECONFIG: target.kubeconfig, [GATEWAY_HOST_VARIABLE]: gatewayHost! },
        timeoutMs: JOB_TIMEOUT_MS,
      });
    },
    { timeout: JOB_TIMEOUT_MS + 5 * 60_000 }
  );
  after(async () => {
    await proxy?.close();
    await scripted?.close();
    await target?.close();
  });

  it('installs from npm in the pod (through the proxy) and solves the task: reward 1, the key found nowhere in the pod', async () => {
    assert.equal(run.code, 0, `${run.stdout}\n${run.stderr}`);
    const result = await trial();
    assert.equal(result.environment_type, 'kubernetes');
    assert.deepEqual(result.rewards, { reward: 1 }, JSON.stringify(result.error));
    assert.ok(
      proxy.destinations.some((destination) => destination.startsWith('registry.npmjs.org')),
      `the install went out through the proxy: ${proxy.destinations.join(', ')}`
    );
  });

  it('every model call went through the gateway, which alone put the real key on it', async () => {
    const served = scripted.calls('claude-code');
    assert.ok(
      served.some((call) => call.turnIndex === 1 && call.status === 200),
      'both scripted turns served'
    );
    assert.deepEqual([...new Set(served.map((call) => call.credential))], [KEY]);
    const result = await trial();
    assert.ok((result.usage?.input_tokens ?? 0) > 0, 'the gateway recorded the calls');
    assert.ok(!proxy.destinations.some((destination) => destination.includes(scripted.url.split('//')[1]!)));
  });

  it('leaves no pod behind', async () => {
    assert.deepEqual(await target.pods(`${LABEL_JOB}=${jobName}`), []);
  });
});
