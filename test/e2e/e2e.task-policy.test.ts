/**
 * task.toml keys that change how a trial runs, each with a task built the way Harbor's example tasks are, through the
 * CLI on the real Docker engine: [agent]/[verifier] user (hello-user), [environment.healthcheck] (hello-healthcheck:
 * the service the solution needs comes up only seconds after start), network_mode / allow_internet with an agent that
 * tries to reach the npm registry (and a public control where it can), gpus on a host without GPUs, an allowlist,
 * and keys Rollout does not act on, which the trial lists in unenforced_limits.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import type { TrialResult } from '../../src/results/trial-result';
import type { CliRun } from '../support/cli';
import { runCli } from '../support/cli';
import { containersOfJob, imagesOfJob, removeJobLeftovers } from '../support/docker';
import { testTemporal } from '../support/temporal';

const suffix = randomBytes(3).toString('hex');
const oracleJob = `task-policy-oracle-${suffix}`;
const probeJob = `task-policy-probe-${suffix}`;
let dir: string;
let oracleRun: CliRun;
let probeRun: CliRun;

/** Reaching the npm registry, as an agent installing a package would: "reachable" or "blocked". */
const PROBE = `(timeout 10 bash -c 'exec 3<>/dev/tcp/registry.npmjs.org/443' 2>/dev/null && echo reachable || echo blocked)`;

async function writeTask(dataset: string, name: string, files: Record<string, string>): Promise<void> {
  const task = path.join(dir, dataset, name);
  const all: Record<string, string> = {
    'instruction.md': `Task-policy test task ${name}.`,
    'environment/Dockerfile': 'FROM debian:bookworm-slim\nWORKDIR /app\n',
    'solution/solve.sh': 'true\n',
    ...files,
  };
  for (const [file, content] of Object.entries(all)) {
    await mkdir(path.dirname(path.join(task, file)), { recursive: true });
    await writeFile(path.join(task, file), content);
  }
}

/** A task.toml with short timeouts and the given lines in each table. */
const toml = (tables: { agent?: string[]; verifier?: string[]; environment?: string[]; more?: string[] } = {}) =>
  [
    '[agent]',
    'timeout_sec = 60.0',
    ...(tables.agent ?? []),
    '[verifier]',
    'timeout_sec = 60.0',
    ...(tables.verifier ?? []),
    '[environment]',
    ...(tables.environment ?? []),
    ...(tables.more ?? []),
    '',
  ].join('\n');
const rewardIf = (check: string) => `if ${check}; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n`;

const trial = async (job: string, task: string, agent: string) =>
  JSON.parse(await readFile(path.join(dir, 'jobs', job, `${task}__${agent}__1`, 'result.json'), 'utf8')) as TrialResult;

describe('task.toml policies on Docker', () => {
  before(async () => {
    await testTemporal().then(({ connection }) => connection.close());
    dir = await mkdtemp(path.join(tmpdir(), 'rollout-policy-'));

    // Oracle tasks.
    await writeTask('oracle-tasks', 'hello-user', {
      'environment/Dockerfile': [
        'FROM debian:bookworm-slim',
        'RUN useradd --create-home --shell /bin/bash agent && useradd --create-home checker',
        'RUN mkdir -p /app && chown agent:agent /app',
        'WORKDIR /app',
        '',
      ].join('\n'),
      'task.toml': toml({ agent: ['user = "agent"'], verifier: ['user = "checker"'] }),
      'solution/solve.sh': 'whoami > /app/whoami.txt\ntouch /app/owned-by-agent\n',
      'tests/test.sh': rewardIf(
        '[ "$(cat /app/whoami.txt)" = agent ] && [ "$(stat -c %U /app/owned-by-agent)" = agent ] && [ "$(whoami)" = checker ]'
      ),
    });
    await writeTask('oracle-tasks', 'hello-healthcheck', {
      'environment/Dockerfile': [
        'FROM debian:bookworm-slim',
        'COPY --chmod=755 entrypoint.sh /entrypoint.sh',
        'WORKDIR /app',
        'ENTRYPOINT ["/entrypoint.sh"]',
        '',
      ].join('\n'),
      // The "service" is ready 3 s after start: without the healthcheck's wait the solution finds nothing.
      'environment/entrypoint.sh': '#!/bin/bash\n(sleep 3 && echo ok > /srv-ready) &\nexec "$@"\n',
      'task.toml': toml({
        more: [
          '[environment.healthcheck]',
          'command = "test -f /srv-ready"',
          'interval_sec = 1',
          'timeout_sec = 5',
          'start_period_sec = 10',
          'start_interval_sec = 1',
          'retries = 2',
        ],
      }),
      'solution/solve.sh': 'cat /srv-ready > /app/result.txt\n',
      'tests/test.sh': rewardIf('grep -q ok /app/result.txt'),
    });
    await writeTask('oracle-tasks', 'healthcheck-fails', {
      'task.toml': toml({
        more: [
          '[environment.healthcheck]',
          'command = "echo not ready; false"',
          'interval_sec = 0',
          'start_interval_sec = 0',
          'retries = 2',
        ],
      }),
      'tests/test.sh': rewardIf('true'),
    });
    await writeTask('oracle-tasks', 'needs-gpu', {
      'task.toml': toml({ environment: ['gpus = 1'] }),
      'tests/test.sh': rewardIf('true'),
    });
    await writeTask('oracle-tasks', 'unknown-user', {
      'task.toml': toml({ agent: ['user = "nobody-by-that-name"'] }),
      'tests/test.sh': rewardIf('true'),
    });
    await writeTask('oracle-tasks', 'allowlist', {
      'task.toml': toml({ environment: ['network_mode = "allowlist"', 'allowed_hosts = ["registry.npmjs.org"]'] }),
      'tests/test.sh': rewardIf('true'),
    });
    await writeTask('oracle-tasks', 'unenforced-keys', {
      'task.toml': toml({
        environment: [
          'skills_dir = "/skills"',
          'mcp_servers = [{ name = "docs", transport = "sse", url = "http://mcp.invalid/sse" }]',
          'gpu_types = []',
        ],
      }),
      'tests/test.sh': rewardIf('true'),
    });
    await writeFile(
      path.join(dir, 'oracle.yaml'),
      [
        `name: ${oracleJob}`,
        'n_concurrent_trials: 4',
        'environment:', // no type: docker
        '  delete: true',
        'agents:',
        '  - name: oracle',
        'datasets:',
        '  - path: oracle-tasks',
        '',
      ].join('\n')
    );

    // A custom agent that probes the npm registry in its install and its run, on tasks with each network policy.
    const verifierProbe = `[ "$${PROBE}" = blocked ]`;
    await writeTask('probe-tasks', 'public', {
      'task.toml': toml(),
      'tests/test.sh': rewardIf('[ "$(cat /app/agent-net)" = reachable ] && [ "$(cat /tmp/install-net)" = reachable ]'),
    });
    await writeTask('probe-tasks', 'no-network', {
      'task.toml': toml({ environment: ['network_mode = "no-network"'] }),
      'tests/test.sh': rewardIf(
        `[ "$(cat /app/agent-net)" = blocked ] && [ "$(cat /tmp/install-net)" = blocked ] && ${verifierProbe}`
      ),
    });
    await writeTask('probe-tasks', 'allow-internet-false', {
      'task.toml': toml({ environment: ['allow_internet = false'] }),
      'tests/test.sh': rewardIf(`[ "$(cat /app/agent-net)" = blocked ] && ${verifierProbe}`),
    });
    // Harbor's network-policy-matrix e-a-diff: the agent's phase alone reaches the network.
    await writeTask('probe-tasks', 'agent-phase-public', {
      'task.toml': toml({ agent: ['network_mode = "public"'], environment: ['network_mode = "no-network"'] }),
      'tests/test.sh': rewardIf(
        `[ "$(cat /app/agent-net)" = reachable ] && [ "$(cat /tmp/install-net)" = blocked ] && ${verifierProbe}`
      ),
    });
    // A separate verifier (Harbor's [verifier.environment]) runs on that environment's own network.
    for (const [name, mode, expected] of [
      ['separate-verifier-offline', 'no-network', 'blocked'],
      ['separate-verifier-public', 'public', 'reachable'],
    ] as const) {
      await writeTask('probe-tasks', name, {
        'task.toml': toml({
          verifier: ['environment_mode = "separate"'],
          more: ['[verifier.environment]', `network_mode = "${mode}"`],
        }),
        // An image of this job's own: a verifier image goes with the main image it is part of.
        'environment/Dockerfile': `FROM debian:bookworm-slim\nWORKDIR /app\nLABEL rollout.test=${suffix}\n`,
        'tests/Dockerfile': 'FROM debian:bookworm-slim\nCOPY test.sh /tests/test.sh\n',
        'tests/test.sh': rewardIf(`[ "$${PROBE}" = ${expected} ]`),
      });
    }
    await writeFile(
      path.join(dir, 'probe.yaml'),
      [
        `name: ${probeJob}`,
        'n_concurrent_trials: 4',
        'agents:',
        '  - name: npm-probe',
        '    install: |',
        `      ${PROBE} > /tmp/install-net`,
        '    execute: |',
        `      ${PROBE} > /app/agent-net`,
        'datasets:',
        '  - path: probe-tasks',
        '',
      ].join('\n')
    );
    // One after the other: a CLI whose job is done exits, and its worker may hold trials of a job running beside it.
    oracleRun = await runCli(['oracle.yaml'], { cwd: dir });
    probeRun = await runCli(['probe.yaml'], { cwd: dir });
  });
  after(async () => {
    await removeJobLeftovers(oracleJob);
    await removeJobLeftovers(probeJob);
  });

  it('finishes both jobs (task errors are trial outcomes)', () => {
    assert.notEqual(oracleRun.code, null, oracleRun.stderr);
    assert.equal(probeRun.code, 0, probeRun.stderr);
  });

  it('runs the agent as [agent] user and the tests as [verifier] user', async () => {
    const result = await trial(oracleJob, 'hello-user', 'oracle');
    assert.equal(result.error, null, JSON.stringify(result.error));
    assert.deepEqual(result.rewards, { reward: 1 });
  });

  it('waits for the healthcheck before the agent (the service comes up 3 s after start)', async () => {
    const result = await trial(oracleJob, 'hello-healthcheck', 'oracle');
    assert.equal(result.error, null, JSON.stringify(result.error));
    assert.deepEqual(result.rewards, { reward: 1 });
    const log = await readFile(path.join(dir, 'jobs', oracleJob, 'hello-healthcheck__oracle__1', 'trial.log'), 'utf8');
    assert.match(log, /healthcheck passed \(attempt \d+\): test -f \/srv-ready/);
  });

  it('fails the trial when the healthcheck keeps failing, before any install', async () => {
    const result = await trial(oracleJob, 'healthcheck-fails', 'oracle');
    assert.equal(result.error?.type, 'EnvironmentStartError');
    assert.match(result.error.message, /healthcheck failed 2 times in a row \(last: exit 1, not ready\)/);
    assert.equal(result.steps.install, undefined);
  });

  it('refuses gpus > 0 on a host without GPUs, a task error naming the key', async () => {
    const result = await trial(oracleJob, 'needs-gpu', 'oracle');
    assert.equal(result.error?.type, 'EnvironmentStartError');
    assert.match(result.error.message, /environment\.gpus = 1, and this Docker host has no GPUs/);
  });

  it('refuses a user the image does not have, naming it', async () => {
    const result = await trial(oracleJob, 'unknown-user', 'oracle');
    assert.equal(result.error?.type, 'EnvironmentStartError');
    assert.match(result.error.message, /user "nobody-by-that-name"/);
  });

  it('refuses network_mode = "allowlist" (no egress proxy here) rather than running with more network', async () => {
    const result = await trial(oracleJob, 'allowlist', 'oracle');
    assert.equal(result.error?.type, 'EnvironmentStartError');
    assert.match(result.error.message, /allowlist" is not supported/);
  });

  it('lists the keys it does not act on in unenforced_limits (empty lists count as unset)', async () => {
    const result = await trial(oracleJob, 'unenforced-keys', 'oracle');
    assert.deepEqual(result.rewards, { reward: 1 });
    assert.ok(result.unenforced_limits.includes('environment.skills_dir'), String(result.unenforced_limits));
    assert.ok(result.unenforced_limits.includes('environment.mcp_servers'), String(result.unenforced_limits));
    assert.ok(!result.unenforced_limits.includes('environment.gpu_types'), String(result.unenforced_limits));
    const plain = await trial(oracleJob, 'hello-user', 'oracle');
    assert.ok(!plain.unenforced_limits.some((key) => key.startsWith('environment.')));
  });

  it('the probe reaches the npm registry from a public task (the control)', async () => {
    const result = await trial(probeJob, 'public', 'npm-probe');
    assert.deepEqual(result.rewards, { reward: 1 }, JSON.stringify(result.error));
  });

  it('no-network: the agent, its install and the tests cannot reach the registry', async () => {
    for (const task of ['no-network', 'allow-internet-false']) {
      const result = await trial(probeJob, task, 'npm-probe');
      assert.equal(result.error, null, `${task}: ${JSON.stringify(result.error)}`);
      assert.deepEqual(result.rewards, { reward: 1 }, task);
    }
  });

  it('[agent] network_mode = "public" over a no-network baseline: only the agent phase reaches it', async () => {
    const result = await trial(probeJob, 'agent-phase-public', 'npm-probe');
    assert.equal(result.error, null, JSON.stringify(result.error));
    assert.deepEqual(result.rewards, { reward: 1 });
  });

  it('a separate verifier environment has the network of its [verifier.environment]', async () => {
    for (const task of ['separate-verifier-offline', 'separate-verifier-public']) {
      const result = await trial(probeJob, task, 'npm-probe');
      assert.equal(result.error, null, `${task}: ${JSON.stringify(result.error)}`);
      assert.deepEqual(result.rewards, { reward: 1 }, task);
    }
  });

  it('leaves no container or image of either job behind', async () => {
    for (const job of [oracleJob, probeJob]) {
      assert.deepEqual(await containersOfJob(job), []);
      assert.deepEqual(await imagesOfJob(job), []);
    }
  });
});
