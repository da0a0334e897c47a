/**
 * `rollout worker` as an orchestrator runs it: `--metrics-port` serves /healthz, /readyz and Prometheus /metrics (the
 * Temporal SDK's and Rollout's, read with a Prometheus text parser), and SIGTERM mid-job drains the worker: it takes
 * no new trials, the ones it holds finish (or, past `--shutdown-grace`, are handed back and restart on the other
 * worker), and the job completes with every trial run once to one result. Real worker processes, Docker, Temporal.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { readFile, readdir, writeFile } from 'node:fs/promises';
import type { AddressInfo, Server } from 'node:net';
import { createServer } from 'node:net';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import type { Client, Connection } from '@temporalio/client';

import type { TrialResult } from '../../src/results/trial-result';
import { freeLoopbackPort } from '../../src/metrics/server';
import { CLI, cliEnv, startCli, workspace, writeOracleJob } from '../support/cli';
import { containersOfJob, removeJobLeftovers } from '../support/docker';
import { histogramCount, sampleSum, scrape } from '../support/prometheus';
import { testTemporal } from '../support/temporal';
import { waitFor, within } from '../support/wait';

const run = randomBytes(3).toString('hex');
let client: Client;
let connection: Connection;
const jobNames: string[] = [];
const started: ReturnType<typeof startCli>[] = [];

interface WorkerProcess {
  hostId: string;
  metrics: string;
  process: ReturnType<typeof startCli>;
}

async function startWorker(name: string, graceSec: number, cwd: string): Promise<WorkerProcess> {
  const hostId = `drain-${name}-${run}`;
  const port = await freeLoopbackPort();
  const args = ['worker', '--host-id', hostId, '--max-trials', '2', '--metrics-port', String(port)];
  const process = startCli([...args, '--shutdown-grace', String(graceSec)], { cwd });
  started.push(process);
  const metrics = `http://127.0.0.1:${port}`;
  await waitFor(`worker ${name} ready`, async () => (await status(`${metrics}/readyz`)) === 200, 60_000);
  return { hostId, metrics, process };
}

async function status(url: string): Promise<number> {
  try {
    return (await fetch(url, { signal: AbortSignal.timeout(5_000) })).status;
  } catch {
    return 0;
  }
}

async function results(jobDir: string): Promise<TrialResult[]> {
  const found: TrialResult[] = [];
  for (const entry of await readdir(jobDir, { withFileTypes: true })) {
    if (!entry.isDirectory()) continue;
    const text = await readFile(path.join(jobDir, entry.name, 'result.json'), 'utf8').catch(() => null);
    if (text) found.push(JSON.parse(text) as TrialResult);
  }
  return found;
}

async function trialExecutions(name: string): Promise<number> {
  return (await client.workflow.count(`RolloutJob = "${name}" AND WorkflowType = "trialWorkflow"`)).count;
}

/** Runs a 6-trial job with two workers and SIGTERMs the first once it runs an agent; returns what happened. */
async function drainMidJob(graceSec: number) {
  const name = `drain-${graceSec}-${run}`;
  jobNames.push(name);
  const dir = await workspace({ tasks: 'test/fixtures/slow-tasks' });
  await writeOracleJob(dir, { name, n_attempts: 6, n_concurrent_trials: 4 });
  // Long enough that an agent running at SIGTERM is still running once a grace of 0 (plus the 5 s steps get) is over.
  if (graceSec === 0) {
    await writeFile(
      path.join(dir, 'tasks/slow/solution/solve.sh'),
      '#!/bin/bash\nsleep 30\necho done > /app/out.txt\n'
    );
  }
  const first = await startWorker('a', graceSec, dir);
  assert.equal(await status(`${first.metrics}/healthz`), 200);
  // A handed-back trial's release steps wait for the stopped worker's queue this long before it restarts.
  const job = startCli(['job.yaml', '--no-worker'], { cwd: dir, env: { ROLLOUT_HOST_LOST_TIMEOUT_SEC: '10' } });
  started.push(job);
  await waitFor('the first worker running an agent (its step gauge)', async () => {
    const families = await scrape(`${first.metrics}/metrics`);
    return sampleSum(families, 'rollout_trial_steps_in_progress', { provider: 'docker', step: 'execute' }) >= 1;
  });
  const second = await startWorker('b', graceSec, dir);
  const signalledAt = new Date().toISOString();
  first.process.kill('SIGTERM');
  // Draining: no longer ready (an orchestrator stops routing to it), still alive.
  await waitFor('the draining worker unready', async () => [503, 0].includes(await status(`${first.metrics}/readyz`)));
  const firstRun = await within(180_000, 'the drained worker to exit', first.process.output);
  assert.equal(firstRun.code, 0, firstRun.stderr);
  const jobRun = await within(300_000, 'the job', job.output).catch(async (err: unknown) => {
    job.kill('SIGKILL');
    throw new Error(`${(err as Error).message}; its output: ${(await job.output).stderr.slice(-3000)}`);
  });
  assert.equal(jobRun.code, 0, jobRun.stderr);
  const all = await results(path.join(dir, 'jobs', name));
  assert.equal(all.length, 6, 'one result per trial');
  for (const result of all) assert.deepEqual(result.rewards, { reward: 1 }, JSON.stringify(result.error));
  assert.equal(await trialExecutions(name), 6, 'one Trial workflow execution per trial');
  assert.deepEqual(await containersOfJob(name), [], 'no container left');
  const onSecond = all.filter((result) => result.host?.includes(second.hostId));
  const families = await scrape(`${second.metrics}/metrics`);
  second.process.kill('SIGTERM');
  assert.equal((await within(60_000, 'the second worker to exit', second.process.output)).code, 0);
  return { first, second, all, onSecond, families, firstRun, signalledAt };
}

describe('rollout worker: metrics and drain', () => {
  before(async () => {
    ({ client, connection } = await testTemporal());
  });
  after(async () => {
    for (const child of started) if (child.exitCode === null) child.kill('SIGKILL');
    await connection.close();
    for (const name of jobNames) await removeJobLeftovers(name);
  });

  it('SIGTERM mid-job: held trials finish on the draining worker, the rest on the other; /metrics shows them', async () => {
    const { first, all, onSecond, families, firstRun, signalledAt } = await drainMidJob(120);
    assert.match(firstRun.stderr, /SIGTERM: draining/);
    assert.match(firstRun.stderr, /drained/);
    const onFirst = all.filter((result) => result.host?.includes(first.hostId));
    assert.ok(onFirst.length >= 1, 'the trial it held finished there');
    assert.equal(onFirst.length + onSecond.length, 6);
    for (const result of all) assert.equal(result.restarts, 0, `${result.trial_name} was handed back`);
    for (const result of onFirst)
      assert.ok(result.started_at < signalledAt, `${result.trial_name} began after SIGTERM`);
    // The second worker's own view, read by a Prometheus parser.
    const ok = { provider: 'docker', outcome: 'ok', error_type: '' };
    const ours = families.text
      .split('\n')
      .filter((line) => line.startsWith('rollout_') && !line.includes('_bucket'))
      .join('\n');
    assert.equal(sampleSum(families, 'rollout_trials_finished_total', ok), onSecond.length, ours);
    const executed = { provider: 'docker', step: 'execute', outcome: 'ok' };
    assert.equal(histogramCount(families.text, 'rollout_step_duration_seconds', executed), onSecond.length, ours);
    assert.equal(sampleSum(families, 'rollout_sandboxes_held', { provider: 'docker' }), 0);
    assert.ok(sampleSum(families, 'temporal_worker_start') >= 1, 'the SDK metrics are there');
    assert.ok(families.some((family) => family.name === 'temporal_request_latency'));
  });

  it('past --shutdown-grace the held trials are handed back and restart on the other worker, once each', async () => {
    const { first, all, onSecond, firstRun } = await drainMidJob(0);
    assert.match(firstRun.stderr, /handed back to other workers/);
    const handedBack = all.filter((result) => result.restarts > 0);
    assert.ok(
      handedBack.length >= 1,
      `a held trial restarted: ${all.map((r) => `${r.host} ${r.restarts}`).join(', ')}`
    );
    for (const result of handedBack) assert.ok(onSecond.includes(result), `${result.trial_name} restarted elsewhere`);
    // A trial whose last step ended within the stopping worker's few seconds kept its result there.
    for (const result of all.filter((r) => r.host?.includes(first.hostId))) assert.equal(result.restarts, 0);
  });

  it('a SIGTERM while the worker still connects stops it at once (a PID 1 would otherwise wait out its grace)', async () => {
    // A Temporal address that accepts connections and never answers: the worker stays in its start.
    const { address, silent } = await silentServer();
    try {
      const port = await freeLoopbackPort();
      const args = ['worker', '--metrics-port', String(port), '--shutdown-grace', '600'];
      const worker = startCli(args, { cwd: await workspace(), env: { TEMPORAL_ADDRESS: address } });
      started.push(worker);
      await waitFor('the worker live', async () => (await status(`http://127.0.0.1:${port}/healthz`)) === 200, 60_000);
      assert.notEqual(await status(`http://127.0.0.1:${port}/readyz`), 200, 'not ready while it connects');
      worker.kill('SIGTERM');
      const { code, stderr } = await within(30_000, 'the worker to stop', worker.output);
      assert.equal(code, 143, stderr);
      assert.match(stderr, /SIGTERM before it ran: stopping/);
    } finally {
      silent.close();
    }
  });

  it(
    "as a container's PID 1, a SIGTERM while it loads its commands stops it (a PID 1 ignores unhandled signals)",
    { skip: process.getuid?.() !== 0 && 'a PID namespace of its own needs root here' },
    async () => {
      const { address, silent } = await silentServer();
      // PID 1 of a new PID namespace, as in a container: a signal with no handler is not fatal to it but ignored.
      const unshare = spawn('unshare', ['--pid', '--fork', '--kill-child', process.execPath, CLI, 'worker'], {
        cwd: await workspace(),
        env: cliEnv({ TEMPORAL_ADDRESS: address }),
        stdio: 'ignore',
      });
      const exited = new Promise<number | null>((resolve) => unshare.on('close', resolve));
      try {
        const pid = await pidOfOnlyChild(unshare.pid!);
        // Mid-load: the Temporal SDK's native module comes with the commands, before any command's own handler.
        await whileLoading(pid, 'core-bridge');
        process.kill(pid, 'SIGTERM');
        // Lost, the worker would go on connecting until its deadline and exit 3 ("Temporal unreachable").
        assert.equal(await within(30_000, 'the worker to stop', exited), 143);
      } finally {
        unshare.kill('SIGKILL');
        silent.close();
      }
    }
  );
});

/** A server that accepts connections and never answers (a Temporal address a worker cannot get past). */
async function silentServer(): Promise<{ address: string; silent: Server }> {
  const silent = createServer(() => undefined);
  await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
  return { address: `127.0.0.1:${(silent.address() as AddressInfo).port}`, silent };
}

/** The one child of `parent` (unshare's: the CLI, PID 1 in its namespace), once it exists. */
async function pidOfOnlyChild(parent: number): Promise<number> {
  const child = () => Number(readFileSync(`/proc/${parent}/task/${parent}/children`, 'utf8').split(' ')[0]);
  await pollClosely('the child process', () => child() > 0);
  return child();
}

/** Until `pid` has mapped a file whose path holds `library` (a native module of the CLI's). */
function whileLoading(pid: number, library: string): Promise<void> {
  return pollClosely(`process ${pid} to load ${library}`, () =>
    readFileSync(`/proc/${pid}/maps`, 'utf8').includes(library)
  );
}

/** Polls every few milliseconds (a process's start is quick) until `check` holds; fails after 60 s. */
async function pollClosely(what: string, check: () => boolean): Promise<void> {
  const deadline = Date.now() + 60_000;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out after 60 s waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 2));
  }
}
