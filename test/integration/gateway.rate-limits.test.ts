/**
 * Shared rate limits on a real Temporal server: three worker processes (each the gateway and lease clients a worker
 * builds, calling as fast as they can) share one `requests_per_minute` limit through the deployment's limiter
 * workflow, and the upstream (the scripted model server, a stand-in for a vendor API) sees at most the limit (+5%) in
 * any minute; three share one `max_concurrent`, and the upstream never has more calls in flight, while a killed one's
 * share goes to the others. The sliding window, the fair shares, the per-trial fairness of waiting calls, which calls
 * a rule covers, and the worker config file are checked directly.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import type { Connection } from '@temporalio/client';
import { NativeConnection, Worker } from '@temporalio/worker';

import { AdaptiveLimit } from '../../src/limits/adaptive-limit';
import { HOLDER_TTL_MS, allotSlots, fairShares } from '../../src/limits/workflow/concurrency-share';
import type { SlotHolder } from '../../src/limits/workflow/concurrency-share';
import { matchingRules, mergedRules } from '../../src/limits/rules';
import { loadWorkerConfig } from '../../src/job/worker-config';
import { RATE_WINDOW_MS, grantFromWindow } from '../../src/limits/workflow/rate-window';
import type { GrantEntry } from '../../src/limits/workflow/rate-window';
import type { RecordedCall, ScriptedModelServer } from '../support/scripted-model-server';
import { startScriptedModelServer } from '../support/scripted-model-server';
import { TEST_ADDRESS, testTemporal } from '../support/temporal';
import { waitFor } from '../support/wait';
import { runCli, workspace } from '../support/cli';

const RPM = 120;
const DURATION_MS = 75_000;
const MAX_CONCURRENT = 6;
/** Long enough for a killed holder to be dropped (HOLDER_TTL_MS) and the survivors to use its share a while. */
const CONCURRENCY_RUN_MS = 35_000;

/** Runs `body` while a worker serves the limiter workflows on `taskQueue`. */
async function withLimiterWorker<T>(taskQueue: string, body: () => Promise<T>): Promise<T> {
  const connection = await NativeConnection.connect({ address: TEST_ADDRESS });
  try {
    const worker = await Worker.create({ connection, taskQueue, workflowsPath: require.resolve('../../workflows') });
    return await worker.runUntil(body());
  } finally {
    await connection.close();
  }
}

function runWorkerProcess(env: Record<string, string>): Promise<{ calls: number }> {
  return startWorkerProcess(env).done;
}

function startWorkerProcess(env: Record<string, string>): { child: ChildProcess; done: Promise<{ calls: number }> } {
  const script = path.join(__dirname, '..', 'support', 'rate-limited-worker.js');
  const child = spawn(process.execPath, [script], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  // After DURATION_MS a process ends once its calls waiting for a lease have their answers: up to a window (62 s)
  // later, and more on a loaded machine.
  const killer = setTimeout(() => child.kill('SIGKILL'), Number(env.DURATION_MS) + 150_000);
  const done = new Promise<{ calls: number }>((resolve, reject) => {
    child.on('exit', (code, signal) => {
      clearTimeout(killer);
      if (code === 0) resolve(JSON.parse(stdout.trim().split('\n').at(-1)!) as { calls: number });
      else reject(new Error(`worker process exited ${code ?? signal}: ${stderr}`));
    });
  });
  return { child, done };
}

/** The most calls the upstream had in flight at once, from when each arrived to when its answer was sent. */
function peakInFlight(calls: readonly RecordedCall[], from = 0): number {
  const events = calls
    .filter((call) => call.endedAt === undefined || call.endedAt > from)
    .flatMap((call) => [
      { at: Math.max(call.at, from), delta: 1 },
      { at: call.endedAt ?? Infinity, delta: -1 },
    ])
    // An answer sent and a call arriving at the same millisecond: the answer first.
    .sort((a, b) => a.at - b.at || a.delta - b.delta);
  let now = 0;
  let peak = 0;
  for (const event of events) peak = Math.max(peak, (now += event.delta));
  return peak;
}

describe('shared rate limits', () => {
  let connection: Connection;
  let scripted: ScriptedModelServer;

  before(async () => {
    ({ connection } = await testTemporal());
    scripted = await startScriptedModelServer();
  });
  after(async () => {
    await connection.close();
    await scripted.close();
  });

  it('the window grants what fits in the last minute, and says when more will', () => {
    const grants: GrantEntry[] = [];
    const limits = { requests_per_minute: 10, input_tokens_per_minute: 1_000 };
    assert.deepEqual(grantFromWindow(grants, limits, 0, { requests: 4, tokens: 400 }), {
      requests: 4,
      tokens: 400,
      retryAfterMs: 0,
    });
    // Tokens bind first: 600 left, 200 per request.
    assert.equal(grantFromWindow(grants, limits, 1_000, { requests: 5, tokens: 1_000 }).requests, 3);
    assert.deepEqual(grantFromWindow(grants, limits, 2_000, { requests: 1, tokens: 100 }), {
      requests: 0,
      tokens: 0,
      retryAfterMs: RATE_WINDOW_MS - 2_000,
    });
    assert.equal(grantFromWindow(grants, limits, RATE_WINDOW_MS + 1, { requests: 10, tokens: 10 }).requests, 7);
    // A request larger than the whole token limit still runs, alone, in an empty window.
    assert.equal(grantFromWindow([], limits, 0, { requests: 1, tokens: 5_000 }).requests, 1);
  });

  it('rules match by upstream and model glob', () => {
    const rules = [
      { match: { upstream: 'anthropic' as const, model: 'claude-*' }, requests_per_minute: 1 },
      { match: {}, max_concurrent: 2 },
    ];
    assert.equal(matchingRules(rules, 'anthropic', 'claude-sonnet-4-5').length, 2);
    assert.equal(matchingRules(rules, 'anthropic', 'other').length, 1);
    assert.equal(matchingRules(rules, 'openai', 'claude-x').length, 1);
  });

  it('max_concurrent shares: max-min fair, never over the limit with stale reports, a silent holder dropped', () => {
    assert.deepEqual(fairShares(10, { a: 2, b: 20, c: 20 }), { a: 2, b: 4, c: 4 });
    assert.deepEqual(fairShares(9, { a: 9 }), { a: 9 });
    const holders: Record<string, SlotHolder> = {};
    assert.equal(allotSlots(holders, 8, { holder: 'a', inUse: 0, want: 8 }, 0), 8);
    // b comes: a may still use its 8 until it reports, so b gets none yet.
    assert.equal(allotSlots(holders, 8, { holder: 'b', inUse: 0, want: 8 }, 100), 0);
    // a reports 8 in flight: its share is cut to 4, but until it reports again it may apply the 8.
    assert.equal(allotSlots(holders, 8, { holder: 'a', inUse: 8, want: 8 }, 200), 4);
    assert.equal(allotSlots(holders, 8, { holder: 'b', inUse: 0, want: 8 }, 300), 0);
    // a's calls over its share end: b gets what a no longer uses.
    assert.equal(allotSlots(holders, 8, { holder: 'a', inUse: 5, want: 8 }, 400), 4);
    assert.equal(allotSlots(holders, 8, { holder: 'b', inUse: 0, want: 8 }, 500), 3);
    assert.equal(allotSlots(holders, 8, { holder: 'a', inUse: 4, want: 8 }, 600), 4);
    assert.equal(allotSlots(holders, 8, { holder: 'b', inUse: 3, want: 8 }, 700), 4);
    // a crashed (no more reports): once silent for the TTL, b may use everything.
    assert.equal(allotSlots(holders, 8, { holder: 'b', inUse: 4, want: 8 }, 600 + HOLDER_TTL_MS), 8);
    assert.deepEqual(Object.keys(holders), ['b']);
    // Giving back: a holder wanting none and using none is forgotten.
    assert.equal(allotSlots(holders, 8, { holder: 'b', inUse: 0, want: 0 }, 700 + HOLDER_TTL_MS), 0);
    assert.deepEqual(holders, {});
  });

  it('a freed slot goes to the waiting call of the trial holding the fewest; a resized limit holds new calls back', async () => {
    const limit = new AdaptiveLimit({ initial: 4, min: 4, max: 4 });
    const signal = new AbortController().signal;
    const held = await Promise.all(['a', 'a', 'a', 'b'].map((owner) => limit.acquire(signal, owner)));
    const order: string[] = [];
    const waiting = ['a1', 'a2', 'b1'].map((name) =>
      limit.acquire(signal, name[0]).then((permit) => (order.push(name), permit))
    );
    limit.release(held[0]!, false); // a holds 2, b 1: b's call goes first though it came last
    limit.release(held[1]!, false); // a 1, b 2: a's first
    const granted = await Promise.all(waiting.slice(0, 1).concat(waiting.slice(2)));
    assert.deepEqual(order, ['b1', 'a1']);
    limit.resize(2);
    for (const permit of [held[2]!, held[3]!]) limit.release(permit, false);
    assert.deepEqual(limit.state(), { limit: 2, inFlight: 2, waiting: 1 }, 'a2 waits: 2 in flight, limit 2');
    limit.release(granted[0]!, false);
    await waiting[1];
    assert.deepEqual(order, ['b1', 'a1', 'a2']);
  });

  it("the worker config file: its rate_limits apply with the job's, a rule in both once; bad input one line", async () => {
    const dir = await workspace({ 'tasks/hello-world': 'examples/tasks/hello-world' });
    const file = path.join(dir, 'worker.yaml');
    await writeFile(file, 'rate_limits:\n  - match: { upstream: anthropic }\n    max_concurrent: 4\n');
    const config = await loadWorkerConfig(file);
    assert.deepEqual(config.rate_limits, [{ match: { upstream: 'anthropic' }, max_concurrent: 4 }]);
    const job = [
      { match: { upstream: 'anthropic' as const }, max_concurrent: 4 },
      { match: {}, requests_per_minute: 9 },
    ];
    assert.deepEqual(mergedRules(config.rate_limits, job), [config.rate_limits[0], job[1]]);
    await writeFile(file, 'rate_limits:\n  - match: { upstream: anthropic }\n    max_concurrent: 0\n');
    await assert.rejects(loadWorkerConfig(file), {
      message: `${file}: rate_limits.0.max_concurrent: Too small: expected number to be >0`,
    });
    await writeFile(file, 'rate_limit: []\n');
    await assert.rejects(loadWorkerConfig(file), { message: `${file}: rate_limit: unknown key` });
    await assert.rejects(loadWorkerConfig(path.join(dir, 'none.yaml')), {
      message: `${path.join(dir, 'none.yaml')}: no such file`,
    });
    // The CLI: one line, exit 2, before connecting anywhere; the variable names the file for `rollout run` too.
    const worker = await runCli(['worker', '--config', file], { cwd: dir, timeoutMs: 60_000 });
    assert.equal(worker.code, 2, worker.stderr);
    assert.equal(worker.stderr.trim(), `error: ${file}: rate_limit: unknown key`);
    await writeFile(path.join(dir, 'job.yaml'), 'agents: [{ name: oracle }]\ndatasets: [{ path: tasks }]\n');
    const run = await runCli(['job.yaml'], { cwd: dir, env: { ROLLOUT_WORKER_CONFIG: file }, timeoutMs: 60_000 });
    assert.equal(run.code, 2, run.stderr);
    assert.match(run.stderr, new RegExp(`error: ${file}: rate_limit: unknown key`));
    await rm(dir, { recursive: true, force: true });
  });

  it('three worker processes share one requests_per_minute limit: the upstream sees at most the limit +5% a minute', async (t) => {
    const run = randomBytes(3).toString('hex');
    const taskQueue = `rate-limits-${run}`;
    const upstream = scripted.session(`rate-${run}`, { turns: [] });
    {
      const results = await withLimiterWorker(taskQueue, () =>
        Promise.all(
          [1, 2, 3].map((n) =>
            runWorkerProcess({
              TEMPORAL_ADDRESS: TEST_ADDRESS,
              DEPLOYMENT: `test-${run}`,
              TASK_QUEUE: taskQueue,
              UPSTREAM_URL: upstream.openAiBaseUrl,
              RPM: String(RPM),
              DURATION_MS: String(DURATION_MS),
              CONCURRENCY: '4',
              NAME: `worker-${n}`,
            })
          )
        )
      );
      const times = upstream.calls.map((call) => call.at).sort((a, b) => a - b);
      assert.equal(
        results.reduce((sum, r) => sum + r.calls, 0),
        times.length
      );
      // The busiest minute the upstream saw.
      let busiest = 0;
      for (let i = 0, j = 0; i < times.length; i++) {
        while (times[i]! - times[j]! >= 60_000) j++;
        busiest = Math.max(busiest, i - j + 1);
      }
      t.diagnostic(
        `busiest minute ${busiest} calls (limit ${RPM}); per process ${results.map((r) => r.calls).join(', ')}`
      );
      assert.ok(busiest <= RPM * 1.05, `${busiest} calls in one minute, limit ${RPM}`);
      // The limit is used, not starved: the first minute's allowance went at once, and more after it.
      assert.ok(busiest >= RPM * 0.9, `only ${busiest} calls in the busiest minute`);
      assert.ok(times.length > RPM, `${times.length} calls in ${DURATION_MS / 1000} s`);
      assert.ok(
        results.every((r) => r.calls > 0),
        'every process got a share'
      );
    }
  });

  it('three worker processes share one max_concurrent: never more in flight at the upstream; a killed one frees its share', async (t) => {
    const run = randomBytes(3).toString('hex');
    const taskQueue = `concurrency-${run}`;
    const upstreams = [1, 2, 3].map((n) => scripted.session(`conc-${run}-${n}`, { turns: [], replyDelayMs: 200 }));
    const processes = upstreams.map((upstream, i) =>
      startWorkerProcess({
        TEMPORAL_ADDRESS: TEST_ADDRESS,
        DEPLOYMENT: `test-${run}`,
        TASK_QUEUE: taskQueue,
        UPSTREAM_URL: upstream.openAiBaseUrl,
        MAX_CONCURRENT: String(MAX_CONCURRENT),
        DURATION_MS: String(CONCURRENCY_RUN_MS),
        CONCURRENCY: String(MAX_CONCURRENT),
        NAME: `worker-${i + 1}`,
      })
    );
    const [victim, ...survivors] = processes;
    let killedAt = 0;
    await withLimiterWorker(taskQueue, async () => {
      await waitFor('every process calling', () => upstreams.every((u) => u.calls.some((c) => c.endedAt)), 60_000);
      killedAt = Date.now();
      victim!.child.kill('SIGKILL');
      await assert.rejects(victim!.done, /exited SIGKILL/);
      return Promise.all(survivors.map((p) => p.done));
    });
    const all = upstreams.flatMap((u) => u.calls);
    const peak = peakInFlight(all);
    // Once the limiter has dropped the silent holder, the survivors take its share.
    const afterCrash = peakInFlight(all, killedAt + HOLDER_TTL_MS + 2_000);
    t.diagnostic(`${all.length} calls, at most ${peak} in flight; after the crash ${afterCrash}`);
    assert.ok(peak <= MAX_CONCURRENT, `${peak} calls in flight at once, max_concurrent ${MAX_CONCURRENT}`);
    assert.equal(afterCrash, MAX_CONCURRENT, "the killed worker's share went to the others");
  });
});
