/**
 * The tests every cloud sandbox provider passes, on its vendor's stand-in (`npm test`) or on the real service
 * (`npm run test:cloud`, credentials set): each vendor's test/environments/<vendor>/e2e.cloud-<vendor>.test.ts is one call of cloudSuite.
 * Through the real CLI, Temporal and the provider's own SDK (or REST client):
 * - without credentials, one line naming the variable and exit 2; `rollout build` prebuilds; the examples job exits 0
 *   with the right rewards;
 * - a built-in agent installed from its registry reaches the scripted model server (the stand-in for model vendors)
 *   through the worker's gateway (the relay, or ROLLOUT_GATEWAY_PUBLIC_URL where the provider has no streamed
 *   process), and the real key is found nowhere in the sandbox (the verifier greps its processes and files);
 * - a worker SIGKILLed mid-trial: the trial restarts on the next run, and no sandbox is left;
 * - a 90-second agent step, a 1 MiB COPY, a large upload and 5 MiB of output; a size the vendor has no guest for
 *   (exit 2) and one rounded up; an image that went inactive or was deleted between jobs; a quota that waiting does
 *   not clear (refused at once); the vendor's rate-limit reply on a fifth of every call kind;
 * - the vendor's quota reply: waited on, then an InfrastructureError carrying the vendor's message;
 * - no sandbox left after any test.
 */
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { cp, mkdir, readFile, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { after, afterEach, before, describe, it } from 'node:test';

import type { Client, Connection } from '@temporalio/client';
import { parse, stringify } from 'yaml';

import { runningTrialSteps } from '../../src/cli/inspect';
import { builtinProvider } from '../../src/environments/registry';
import { deploymentId } from '../../src/temporal/deployment';
import type { LlmCallRecord } from '../../src/gateway/records';
import type { TrialResult } from '../../src/results/trial-result';
import { runCli, startCli, workspace } from './cli';
import type { CloudStandIn, CloudVendor } from './cloud-stand-in';
import { dockerHostAddress } from './docker';
import { prepareGatewayTask } from './gateway-agent';
import type { ScriptedModelServer } from './scripted-model-server';
import { startScriptedModelServer } from './scripted-model-server';
import { freePort } from './serve';
import { TEST_ADDRESS, TEST_HOST_ID, testTemporal } from './temporal';
import { waitFor } from './wait';

/** What the suite runs against: a vendor's stand-in, or the real service with the worker's credentials. */
export interface CloudTarget {
  /** The stand-in, or null against the real service (the quota test then does not run). */
  standIn: CloudStandIn | null;
  /** The worker's environment for the provider: the stand-in's `env`, or the real credentials. */
  env: Record<string, string>;
  /** The provider's own job.yaml `environment:` keys (e.g. fly's app), beside `type`. */
  settings: Record<string, unknown>;
}

export interface CloudSuiteOptions {
  vendor: CloudVendor;
  /** Starts the stand-in (or checks the credentials) once for the whole file. */
  target: () => Promise<CloudTarget>;
  /**
   * The provider has no streamed process (Fly): agents reach the gateway at ROLLOUT_GATEWAY_PUBLIC_URL, which the
   * suite sets to an address of this host on Docker's bridge (where the stand-in's sandboxes run).
   */
  publicGateway?: boolean;
  /** The built-in agent of the gateway test (default pi: one npm package, quick to install). */
  agent?: string;
  /** The variable whose absence the credentials check names (e.g. FLY_API_TOKEN): emptied, the CLI exits 2. */
  credential: string;
  /**
   * Sizes (task.toml [environment] keys) the vendor has no guest for: refused before the job starts (exit 2, naming
   * the task file and `field`); and one it rounds up (the trial log says to what). Absent: it takes any size.
   */
  sizes?: { refused: Record<string, string>; field: string; rounded: Record<string, string>; roundedTo: RegExp };
  /** MB of the file the long-step test uploads (the oracle's solution): 100 unless the vendor allows less. */
  uploadMb?: number;
  /** Why the rate-limit test does not run for this vendor yet (its provider does not wait on every call kind). */
  faultsNotYet?: string;
  /** Why the long-step, large-file, retired-image and lasting-quota tests do not run for this vendor yet. */
  largeNotYet?: string;
}

const MIB = 2 ** 20;

/**
 * A task with a 90-second agent step, a 1 MiB file its Dockerfile COPYs, an `uploadMb` MB file in its tests (the
 * verifier's upload), and 5 MiB of agent output to collect; its verifier checks both files arrived whole.
 */
async function writeBigTask(dir: string, uploadMb: number): Promise<void> {
  const hash = (data: Buffer) => createHash('sha256').update(data).digest('hex');
  const blob = randomBytes(MIB);
  const big = randomBytes(uploadMb * 1_000_000);
  await mkdir(path.join(dir, 'environment'), { recursive: true });
  await mkdir(path.join(dir, 'solution'), { recursive: true });
  await mkdir(path.join(dir, 'tests'), { recursive: true });
  await writeFile(path.join(dir, 'environment', 'blob.bin'), blob);
  await writeFile(
    path.join(dir, 'environment', 'Dockerfile'),
    'FROM debian:bookworm-slim\nWORKDIR /app\nCOPY blob.bin /app/blob.bin\n'
  );
  // In tests/: the verifier's one upload (the oracle's solution goes to two places).
  await writeFile(path.join(dir, 'tests', 'big.bin'), big);
  await writeFile(
    path.join(dir, 'solution', 'solve.sh'),
    [
      '#!/bin/bash',
      'sleep 90',
      'sha256sum /app/blob.bin | cut -d" " -f1 > /app/blob.sha',
      `head -c ${5 * MIB} /dev/urandom > /logs/agent/output.bin`,
      '',
    ].join('\n'),
    { mode: 0o755 }
  );
  await writeFile(
    path.join(dir, 'tests', 'test.sh'),
    [
      '#!/bin/bash',
      'big=$(sha256sum /tests/big.bin | cut -d" " -f1)',
      `if [ "$big" = ${hash(big)} ] && [ "$(cat /app/blob.sha)" = ${hash(blob)} ]; then`,
      '  echo 1 > /logs/verifier/reward.txt',
      'else',
      '  echo 0 > /logs/verifier/reward.txt',
      'fi',
      '',
    ].join('\n'),
    { mode: 0o755 }
  );
  await writeFile(path.join(dir, 'instruction.md'), 'Hash the files.\n');
  await writeFile(
    path.join(dir, 'task.toml'),
    'version = "1.0"\n\n[agent]\ntimeout_sec = 200.0\n\n[verifier]\ntimeout_sec = 60.0\n\n' +
      '[environment]\nbuild_timeout_sec = 600.0\ncpus = "1"\nmemory = "1G"\n'
  );
}

/** A copy of the examples' hello-world task with its own environment (a build of its own) and `environment` keys. */
async function helloTask(dir: string, name: string, environment: Record<string, string> = {}): Promise<void> {
  const source = path.join(dir, 'examples', 'tasks', 'hello-world');
  const target = path.join(dir, 'tasks', name);
  await cp(source, target, { recursive: true });
  await writeFile(
    path.join(target, 'environment', 'Dockerfile'),
    `FROM debian:bookworm-slim\n# ${name} ${run}\nWORKDIR /app\n`
  );
  const keys = Object.entries(environment).map(([key, value]) => `${key} = "${value}"`);
  const toml = (await readFile(path.join(source, 'task.toml'), 'utf8')).replace(
    /\[environment\][^[]*/,
    ['[environment]', 'build_timeout_sec = 300.0', ...keys, ''].join('\n')
  );
  await writeFile(path.join(target, 'task.toml'), toml);
}

/** Set by `npm run test:cloud` (scripts/test-cloud.js): the suite runs against the real services. */
export const REAL_CLOUD = process.env.ROLLOUT_TEST_CLOUD === 'real';

/** A stand-in as the target: started once per file, stopped (its containers and images removed) after. */
export function standInTarget(
  start: () => Promise<CloudStandIn>,
  settings: Record<string, unknown> = {}
): () => Promise<CloudTarget> {
  return async () => {
    const standIn = await start();
    return { standIn, env: standIn.env, settings };
  };
}

/** The real service: the credentials are the worker's own environment (the CLI inherits it). */
export function realTarget(settings: Record<string, unknown> = {}): () => Promise<CloudTarget> {
  return () => Promise.resolve({ standIn: null, env: {}, settings });
}

const run = randomBytes(3).toString('hex');
const KEY = `sk-real-${randomBytes(12).toString('hex')}`;
const HELLO = "printf 'Hello, world!' > /app/hello.txt";
const CLI_TIMEOUT_MS = 15 * 60_000;

export function cloudSuite(options: CloudSuiteOptions): void {
  const { vendor } = options;
  const provider = builtinProvider(vendor);
  describe(`${vendor}: cloud sandbox provider end to end (${vendor} stand-in unless npm run test:cloud)`, () => {
    let target: CloudTarget;
    let dir: string;
    let client: Client;
    let connection: Connection;
    let scripted: ScriptedModelServer;
    const workerEnv: Record<string, string> = {};
    const jobs: string[] = [];

    /** The sandboxes a job still holds: the stand-in's own count, or the provider's listing by label. */
    const sandboxesOf = async (jobName: string): Promise<string[]> => {
      if (target.standIn) return target.standIn.sandboxes();
      const environment = provider!.create({ hostId: TEST_HOST_ID, deployment: deploymentId(TEST_ADDRESS, 'default') });
      const held = await environment.heldEnvironments();
      return held.filter((h) => h.trialId.includes(jobName)).map((h) => h.id);
    };
    const trialResult = async (jobName: string, trial: string) =>
      JSON.parse(await readFile(path.join(dir, 'jobs', jobName, trial, 'result.json'), 'utf8')) as TrialResult;

    /** Writes a job file: `base` with this provider's environment and a unique name; returns the name. */
    const jobFile = async (file: string, base: Record<string, unknown>, environment: Record<string, unknown> = {}) => {
      const name = `${vendor}-${path.basename(file, '.yaml')}-${run}`;
      jobs.push(name);
      const job = {
        ...base,
        name,
        jobs_dir: path.join(dir, 'jobs'),
        environment: { type: vendor, ...target.settings, ...environment },
      };
      await writeFile(path.join(dir, file), stringify(job));
      return name;
    };
    const cli = (file: string, env: Record<string, string> = {}) =>
      runCli([file], { cwd: dir, env: { ...workerEnv, ...env }, timeoutMs: CLI_TIMEOUT_MS });

    before(async () => {
      assert.ok(provider, `${vendor} is a provider of src/environments/registry.ts`);
      ({ client, connection } = await testTemporal());
      target = await options.target();
      Object.assign(workerEnv, target.env, { ROLLOUT_TEST_KEY: KEY });
      scripted = await startScriptedModelServer({ host: '127.0.0.1', port: 0 });
      if (options.publicGateway) {
        const host = await dockerHostAddress();
        const port = await freePort(host);
        workerEnv.ROLLOUT_GATEWAY_LISTEN = `${host}:${port}`;
        workerEnv.ROLLOUT_GATEWAY_PUBLIC_URL = `http://${host}:${port}`;
      }
      dir = await workspace({ examples: 'examples', 'slow-tasks': 'test/fixtures/slow-tasks' });
    });
    afterEach(async () => {
      // Every test leaves nothing running at the vendor (a removal the vendor finishes in the background, such as a
      // stand-in's container removal under load, is given a minute).
      for (const name of jobs) {
        await waitFor(`no sandbox of ${name} left`, async () => (await sandboxesOf(name)).length === 0, 60_000);
      }
    });
    after(async () => {
      await connection?.close();
      await scripted?.close();
      await target?.standIn?.stop();
    });

    it('runs the examples job through the CLI after rollout build: exit 0, the right rewards (no credentials: exit 2)', async () => {
      const examples = parse(await readFile(path.join(dir, 'examples', 'job.yaml'), 'utf8')) as Record<string, unknown>;
      const name = await jobFile('examples/cloud.yaml', examples, { max_sandboxes: 2 });
      const noKey = await cli('examples/cloud.yaml', { [options.credential]: '' });
      assert.equal(noKey.code, 2, noKey.stderr);
      assert.match(noKey.stderr, new RegExp(`^error: ${vendor}: .*${options.credential}`, 'm'));
      const built = await runCli(['build', 'examples/cloud.yaml'], { cwd: dir, env: workerEnv });
      assert.equal(built.code, 0, built.stderr);
      const result = await cli('examples/cloud.yaml');
      assert.equal(result.code, 0, result.stderr);
      assert.match(result.stderr, /6\/6 done/);
      assert.deepEqual((await trialResult(name, 'hello-world__oracle__1')).rewards, { reward: 1 });
      assert.deepEqual((await trialResult(name, 'hello-world__greeter__1')).rewards, { reward: 1 });
      assert.deepEqual((await trialResult(name, 'word-count__oracle__1')).rewards, { lines: 1, words: 1 });
      assert.deepEqual((await trialResult(name, 'impossible__oracle__1')).rewards, { reward: 0 });
      assert.equal((await trialResult(name, 'hello-world__greeter__1')).environment_type, vendor);
    });

    it('runs a built-in agent through the gateway to the scripted model server; the key is nowhere in the sandbox', async () => {
      const agent = options.agent ?? 'pi';
      const session = scripted.session(`${vendor}-${run}`, { turns: [{ shell: HELLO }, { say: 'done' }] });
      const task = path.join(dir, 'gateway-tasks', 'hello-world');
      await mkdir(path.dirname(task), { recursive: true });
      await cp(path.join(dir, 'examples', 'tasks', 'hello-world'), task, { recursive: true });
      await prepareGatewayTask(task, KEY);
      const name = await jobFile('gateway.yaml', {
        agents: [
          {
            name: agent,
            model: 'scripted-model',
            env: { OPENAI_BASE_URL: `${session.openAiBaseUrl}`, OPENAI_API_KEY: '${ROLLOUT_TEST_KEY}' },
          },
        ],
        datasets: [{ path: 'gateway-tasks' }],
      });
      const result = await cli('gateway.yaml');
      assert.equal(result.code, 0, result.stderr);
      const trial = await trialResult(name, `hello-world__${agent}__1`);
      assert.equal(trial.error, null, JSON.stringify(trial.error));
      assert.deepEqual(trial.rewards, { reward: 1 }, 'the agent did the task, and the verifier found no key');
      assert.ok(session.calls.length >= 2, 'the model was called through the gateway');
      const calls = (
        await readFile(path.join(dir, 'jobs', name, `hello-world__${agent}__1`, 'agent', 'llm-calls.jsonl'), 'utf8')
      )
        .trim()
        .split('\n')
        .map((line) => JSON.parse(line) as LlmCallRecord);
      assert.ok(
        calls.some((call) => call.status === 200),
        'recorded in llm-calls.jsonl'
      );
      const log = await readFile(path.join(dir, 'jobs', name, `hello-world__${agent}__1`, 'trial.log'), 'utf8');
      assert.match(log, options.publicGateway ? /public gateway URL/ : /gateway relay \((node|python) /);
    });

    it('restarts a trial whose worker was SIGKILLed mid-trial, and leaves no sandbox', async () => {
      const name = await jobFile('slow.yaml', {
        agents: [{ name: 'oracle', env: { SLOW_SECONDS: '20' } }],
        datasets: [{ path: 'slow-tasks' }],
      });
      const first = startCli(['slow.yaml'], { cwd: dir, env: workerEnv, timeoutMs: CLI_TIMEOUT_MS });
      await waitFor(
        'the trial in its execute step',
        async () => (await runningTrialSteps(client, name)).some((trial) => trial.step === 'execute'),
        5 * 60_000
      );
      first.kill('SIGKILL');
      await first.output;
      if (target.standIn)
        assert.ok((await target.standIn.sandboxes()).length >= 1, 'the killed worker left its sandbox');
      const second = await cli('slow.yaml');
      assert.equal(second.code, 0, second.stderr);
      const trial = await trialResult(name, 'slow__oracle__1');
      assert.deepEqual(trial.rewards, { reward: 1 }, JSON.stringify(trial.error));
      assert.ok(trial.restarts > 0, 'the trial restarted');
    });

    it('runs a 90-second agent step, builds a 1 MiB COPY, uploads a large file and collects 5 MiB of output', async (t) => {
      if (options.largeNotYet) return t.skip(options.largeNotYet);
      await writeBigTask(path.join(dir, 'big-tasks', 'big'), options.uploadMb ?? 100);
      const name = await jobFile('big.yaml', { agents: [{ name: 'oracle' }], datasets: [{ path: 'big-tasks' }] });
      const result = await cli('big.yaml');
      assert.equal(result.code, 0, result.stderr);
      const trial = await trialResult(name, 'big__oracle__1');
      assert.equal(trial.error, null, JSON.stringify(trial.error));
      assert.deepEqual(trial.rewards, { reward: 1 }, 'both files arrived whole');
      const output = await stat(path.join(dir, 'jobs', name, 'big__oracle__1', 'agent', 'output.bin'));
      assert.equal(output.size, 5 * MIB, 'the agent output collected whole');
    });

    it('refuses a size the vendor has no guest for before the job starts (exit 2), and rounds another up', async (t) => {
      const sizes = options.sizes;
      if (!sizes) return t.skip(`${vendor} takes any size`);
      await helloTask(dir, `refused-${vendor}`, sizes.refused);
      const refusedName = await jobFile('refused.yaml', {
        agents: [{ name: 'oracle' }],
        datasets: [{ path: `tasks/refused-${vendor}` }],
      });
      const refused = await cli('refused.yaml');
      assert.equal(refused.code, 2, refused.stderr);
      assert.match(refused.stderr, new RegExp(`task\\.toml: ${sizes.field.replace('.', '\\.')}: `));
      await assert.rejects(trialResult(refusedName, `refused-${vendor}__oracle__1`), 'no trial ran');
      if (target.standIn) assert.deepEqual(await target.standIn.sandboxes(), []);
      await helloTask(dir, `rounded-${vendor}`, sizes.rounded);
      const name = await jobFile('rounded.yaml', {
        agents: [{ name: 'oracle' }],
        datasets: [{ path: `tasks/rounded-${vendor}` }],
      });
      const rounded = await cli('rounded.yaml');
      assert.equal(rounded.code, 0, rounded.stderr);
      assert.deepEqual((await trialResult(name, `rounded-${vendor}__oracle__1`)).rewards, { reward: 1 });
      const log = await readFile(path.join(dir, 'jobs', name, `rounded-${vendor}__oracle__1`, 'trial.log'), 'utf8');
      assert.match(log, sizes.roundedTo);
    });

    it("starts from a vendor's image that went inactive or was deleted between two jobs", async (t) => {
      const standIn = target.standIn;
      if (!standIn?.retireImages) return t.skip(`${vendor} images have no such state here`);
      if (options.largeNotYet) return t.skip(options.largeNotYet);
      await helloTask(dir, `retired-${vendor}`);
      for (const how of ['first', 'inactive', 'deleted'] as const) {
        if (how !== 'first') await standIn.retireImages(how);
        const name = await jobFile(`retired-${how}.yaml`, {
          agents: [{ name: 'oracle' }],
          datasets: [{ path: `tasks/retired-${vendor}` }],
        });
        const result = await cli(`retired-${how}.yaml`);
        assert.equal(result.code, 0, `${how}: ${result.stderr}`);
        assert.deepEqual((await trialResult(name, `retired-${vendor}__oracle__1`)).rewards, { reward: 1 }, how);
      }
    });

    it('refuses a quota that waiting does not clear at once, with the vendor message', async (t) => {
      const standIn = target.standIn;
      if (!standIn?.lastingQuota) return t.skip(`${vendor} has no such quota here`);
      if (options.largeNotYet) return t.skip(options.largeNotYet);
      await helloTask(dir, `lasting-${vendor}`);
      standIn.lastingQuota(true);
      try {
        const name = await jobFile('lasting.yaml', {
          agents: [{ name: 'oracle' }],
          datasets: [{ path: `tasks/lasting-${vendor}` }],
        });
        // A wait on it would outlast the test's own limit: refused at once instead.
        const failed = await cli('lasting.yaml', { ROLLOUT_CLOUD_QUOTA_WAIT_SEC: '3600' });
        const trial = await trialResult(name, `lasting-${vendor}__oracle__1`).catch((err: Error) => {
          throw new Error(`${err.message}; the CLI said: ${failed.stderr}`);
        });
        assert.equal(trial.error?.type, 'InfrastructureError');
        assert.match(trial.error?.message ?? '', /waiting does not clear/);
        assert.equal(trial.rewards, null);
      } finally {
        standIn.lastingQuota(false);
      }
    });

    it("rides out the vendor's rate-limit reply on a fifth of every API call kind: right rewards, no sandbox left", async (t) => {
      const standIn = target.standIn;
      if (!standIn) return t.skip('rate limits cannot be provoked on the real service');
      if (options.faultsNotYet) return t.skip(options.faultsNotYet);
      const examples = parse(await readFile(path.join(dir, 'examples', 'job.yaml'), 'utf8')) as Record<string, unknown>;
      const name = await jobFile('examples/faults.yaml', examples, { max_sandboxes: 2 });
      standIn.setFaults({ rate: 0.2 });
      try {
        const result = await cli('examples/faults.yaml', { ROLLOUT_CLOUD_QUOTA_WAIT_SEC: '120' });
        assert.equal(result.code, 0, result.stderr);
        assert.match(result.stderr, /6\/6 done/);
        assert.deepEqual((await trialResult(name, 'hello-world__oracle__1')).rewards, { reward: 1 });
        assert.deepEqual((await trialResult(name, 'word-count__oracle__1')).rewards, { lines: 1, words: 1 });
        assert.deepEqual((await trialResult(name, 'impossible__oracle__1')).rewards, { reward: 0 });
        for (const trial of ['hello-world__greeter__1', 'hello-world__oracle__1']) {
          assert.equal((await trialResult(name, trial)).error, null, trial);
        }
      } finally {
        standIn.setFaults({ rate: 0 });
      }
    });

    it("waits on the vendor's quota reply, then ends in an InfrastructureError carrying its message", async (t) => {
      const standIn = target.standIn;
      if (!standIn) return t.skip('a quota cannot be provoked on the real service');
      const quick = { ROLLOUT_CLOUD_QUOTA_WAIT_SEC: '2' };
      // A passing quota is absorbed.
      standIn.failNextCreates(2);
      const absorbed = await jobFile('quota-passes.yaml', {
        agents: [{ name: 'oracle' }],
        datasets: [{ path: 'examples/tasks/hello-world' }],
      });
      const passed = await cli('quota-passes.yaml', { ROLLOUT_CLOUD_QUOTA_WAIT_SEC: '120' });
      assert.equal(passed.code, 0, passed.stderr);
      assert.deepEqual((await trialResult(absorbed, 'hello-world__oracle__1')).rewards, { reward: 1 });
      // One that lasts is an infrastructure error (not scored), after the wait and the trial's restarts.
      standIn.failNextCreates(1000);
      try {
        const name = await jobFile('quota.yaml', {
          agents: [{ name: 'oracle' }],
          datasets: [{ path: 'examples/tasks/hello-world' }],
        });
        const failed = await cli('quota.yaml', quick);
        const trial = await trialResult(name, 'hello-world__oracle__1').catch((err: Error) => {
          throw new Error(`${err.message}; the CLI said: ${failed.stderr}`);
        });
        assert.equal(trial.error?.type, 'InfrastructureError');
        assert.match(trial.error?.message ?? '', /quota or rate limit, still refused after waiting/);
        assert.equal(trial.rewards, null);
      } finally {
        standIn.failNextCreates(0);
      }
    });
  });
}
