/**
 * Shared rate limits on a real Temporal server: three worker processes (each the gateway and lease client a worker
 * builds, calling as fast as they can) share one `requests_per_minute` limit through the deployment's limiter
 * workflow; the upstream (the scripted model server, a stand-in for a vendor API) sees at most the limit (+5%) in
 * any minute. The sliding window itself, and which calls a rule covers, are checked directly.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import type { Connection } from '@temporalio/client';
import { NativeConnection, Worker } from '@temporalio/worker';

import { matchingRules } from '../src/gateway/rate-limits';
import { RATE_WINDOW_MS, grantFromWindow } from '../src/gateway/rate-window';
import type { GrantEntry } from '../src/gateway/rate-window';
import type { ScriptedModelServer } from './support/scripted-model-server';
import { startScriptedModelServer } from './support/scripted-model-server';
import { TEST_ADDRESS, testTemporal } from './support/temporal';

const RPM = 120;
const DURATION_MS = 75_000;

function runWorkerProcess(env: Record<string, string>): Promise<{ calls: number }> {
  const script = path.join(__dirname, 'support', 'rate-limited-worker.js');
  const child = spawn(process.execPath, [script], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const killer = setTimeout(() => child.kill('SIGKILL'), DURATION_MS + 60_000);
  return new Promise((resolve, reject) => {
    child.on('exit', (code) => {
      clearTimeout(killer);
      if (code === 0) resolve(JSON.parse(stdout.trim().split('\n').at(-1)!) as { calls: number });
      else reject(new Error(`worker process exited ${code}: ${stderr}`));
    });
  });
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

  it('three worker processes share one requests_per_minute limit: the upstream sees at most the limit +5% a minute', async (t) => {
    const run = randomBytes(3).toString('hex');
    const taskQueue = `rate-limits-${run}`;
    const nativeConnection = await NativeConnection.connect({ address: TEST_ADDRESS });
    const worker = await Worker.create({
      connection: nativeConnection,
      taskQueue,
      workflowsPath: require.resolve('../workflows'),
    });
    const upstream = scripted.session(`rate-${run}`, { turns: [] });
    try {
      const results = await worker.runUntil(
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
    } finally {
      await nativeConnection.close();
    }
  });
});
