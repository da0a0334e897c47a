/**
 * Sandbox creations paced across a deployment (`environment.creates_per_second`) on a real Temporal server: three
 * worker processes (each the creation gate and pace client a worker builds, creating as fast as they may) share one
 * pace through the deployment's limiter workflow, and a vendor stand-in (an HTTP server recording each create call,
 * answering a share of them with 429 as a vendor over its limit does) sees at most the pace (+5%) in any second,
 * retries included. The gate's adaptive in-flight limit halves on quota replies and grows back; the vendors' default
 * paces and the job.yaml key are checked directly.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import type { Connection } from '@temporalio/client';
import { NativeConnection, Worker } from '@temporalio/worker';

import { CloudQuotaError, withQuotaBackoff } from '../../src/environments/kit/quota';
import { DEFAULT_CREATES_PER_SECOND, creationPace } from '../../src/environments/creation-rates';
import { SandboxCreation } from '../../src/environments/sandbox-creation';
import { JobConfigSchema } from '../../src/job/checks';
import { TEST_ADDRESS, testTemporal } from '../support/temporal';

const PER_SECOND = 8;
const CREATES_PER_PROCESS = 25;
/** Every fifth create call is answered 429 (the stand-in's own rate-limit reply). */
const REFUSE_EVERY = 5;

interface CreatingResult {
  created: number;
  lowestLimit: number;
  finalLimit: number;
}

function runCreatingProcess(env: Record<string, string>): Promise<CreatingResult> {
  const child = spawn(process.execPath, [path.join(__dirname, '..', 'support', 'creating-worker.js')], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const killer = setTimeout(() => child.kill('SIGKILL'), 120_000);
  return new Promise((resolve, reject) => {
    child.on('exit', (code, signal) => {
      clearTimeout(killer);
      if (code === 0) resolve(JSON.parse(stdout.trim().split('\n').at(-1)!) as CreatingResult);
      else reject(new Error(`creating process exited ${code ?? signal}: ${stderr}`));
    });
  });
}

/** A vendor's create endpoint, recording when each call arrived; every REFUSE_EVERY-th is answered 429. */
async function startCreateRecorder(): Promise<{ url: string; arrivals: number[]; close: () => Promise<void> }> {
  const arrivals: number[] = [];
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      arrivals.push(Date.now());
      const refused = arrivals.length % REFUSE_EVERY === 0;
      res.writeHead(refused ? 429 : 201, { 'content-type': 'application/json' });
      res.end(refused ? '{"message":"rate limit exceeded"}' : '{"id":"sb"}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    arrivals,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

/** The most arrivals in any one second. */
function busiestSecond(times: number[]): number {
  const sorted = [...times].sort((a, b) => a - b);
  let busiest = 0;
  for (let i = 0, j = 0; i < sorted.length; i++) {
    while (sorted[i]! - sorted[j]! >= 1_000) j++;
    busiest = Math.max(busiest, i - j + 1);
  }
  return busiest;
}

class QuotaReply extends Error {}

describe('sandbox creation pace', () => {
  let connection: Connection;

  before(async () => {
    ({ connection } = await testTemporal());
  });
  after(async () => {
    await connection.close();
  });

  it("defaults are the vendors' documented limits; job.yaml creates_per_second overrides; docker is not paced", () => {
    assert.deepEqual(creationPace('modal', undefined), { createsPerSecond: DEFAULT_CREATES_PER_SECOND.modal });
    assert.deepEqual(creationPace('e2b', 2), { createsPerSecond: 2 });
    assert.deepEqual(creationPace('docker', undefined), {});
    assert.deepEqual(creationPace('docker', 3), { createsPerSecond: 3 });
    const job = JobConfigSchema.parse({
      agents: [{ name: 'oracle' }],
      datasets: [{ path: 'tasks' }],
      environment: { type: 'docker', creates_per_second: 2.5 },
    });
    assert.equal(job.environment.creates_per_second, 2.5);
    const bad = JobConfigSchema.safeParse({
      agents: [{ name: 'oracle' }],
      datasets: [{ path: 'tasks' }],
      environment: { type: 'docker', creates_per_second: 0 },
    });
    assert.equal(bad.success, false);
    assert.deepEqual(bad.error?.issues[0]?.path, ['environment', 'creates_per_second']);
  });

  it('quota replies halve the creations in flight, normal answers grow them back; unpaced providers are not gated', async () => {
    const creation = new SandboxCreation();
    const signal = new AbortController().signal;
    const request = { provider: 'vendor', perSecond: 16, owner: 't', signal };
    let replies = 2;
    // A create the vendor answers with two rate-limit replies first, retried by the providers' shared backoff.
    await creation.create(request, () =>
      withQuotaBackoff(
        'vendor',
        (err) => (err instanceof QuotaReply ? 'slow down' : null),
        () => (replies-- > 0 ? Promise.reject(new QuotaReply()) : Promise.resolve('sb')),
        { minDelayMs: 1, maxDelayMs: 2, maxWaitMs: 10_000 }
      )
    );
    assert.equal(creation.state('vendor')!.limit, 8, 'halved once for the round');
    // A quota that never clears also counts as a reply.
    await assert.rejects(
      creation.create(request, () => Promise.reject(new CloudQuotaError('vendor', 'quota', null))),
      CloudQuotaError
    );
    assert.equal(creation.state('vendor')!.limit, 4);
    for (let i = 0; i < 40; i++) await creation.create(request, () => Promise.resolve('sb'));
    assert.ok(creation.state('vendor')!.limit >= 8, `grown back to ${creation.state('vendor')!.limit}`);
    assert.equal(
      await creation.create({ ...request, perSecond: undefined, provider: 'docker' }, () => Promise.resolve(1)),
      1
    );
    assert.equal(creation.state('docker'), undefined);
  });

  it('three worker processes share one creates_per_second: the stand-in sees at most the pace +5% in any second, retries included', async (t) => {
    const run = randomBytes(3).toString('hex');
    const taskQueue = `creation-rate-${run}`;
    const recorder = await startCreateRecorder();
    try {
      const worker = await NativeConnection.connect({ address: TEST_ADDRESS }).then(async (native) => {
        const w = await Worker.create({
          connection: native,
          taskQueue,
          workflowsPath: require.resolve('../../workflows'),
        });
        return { w, native };
      });
      const results = await worker.w
        .runUntil(
          Promise.all(
            [1, 2, 3].map((n) =>
              runCreatingProcess({
                TEMPORAL_ADDRESS: TEST_ADDRESS,
                DEPLOYMENT: `test-${run}`,
                TASK_QUEUE: taskQueue,
                STAND_IN_URL: recorder.url,
                PER_SECOND: String(PER_SECOND),
                CREATES: String(CREATES_PER_PROCESS),
                CONCURRENCY: '12',
                NAME: `worker-${n}`,
              })
            )
          )
        )
        .finally(() => worker.native.close());
      const busiest = busiestSecond(recorder.arrivals);
      const refused = Math.floor(recorder.arrivals.length / REFUSE_EVERY);
      t.diagnostic(
        `busiest second ${busiest} create calls (pace ${PER_SECOND}); ${recorder.arrivals.length} calls, ` +
          `${refused} answered 429; per process ${JSON.stringify(results)}`
      );
      assert.deepEqual(
        results.map((r) => r.created),
        [CREATES_PER_PROCESS, CREATES_PER_PROCESS, CREATES_PER_PROCESS]
      );
      assert.equal(recorder.arrivals.length, CREATES_PER_PROCESS * 3 + refused, 'each refused call retried once');
      assert.ok(busiest <= PER_SECOND * 1.05, `${busiest} create calls in one second, pace ${PER_SECOND}`);
      // The pace is used, not starved.
      assert.ok(busiest >= PER_SECOND * 0.5, `only ${busiest} create calls in the busiest second`);
      assert.ok(
        results.some((r) => r.lowestLimit < PER_SECOND),
        "a 429 halved some process's creations in flight"
      );
    } finally {
      await recorder.close();
    }
  });
});
