/**
 * The latency the model gateway adds per call: the same Chat Completions request (JSON, and SSE to the last byte)
 * sent straight to a local scripted upstream, through the gateway, and through the gateway for a trial with per-trial
 * `limits` in a job with a `budget` (its ledger a real workflow on the tests' Temporal server, every call's spend
 * reported to it; uncontended, far from the budget) and shared `rate_limits` (requests_per_minute and max_concurrent
 * through their limiter workflows; uncontended: leases and the share held locally), interleaved call by call so load drift hits all alike. The
 * upstream runs in its own process (as a vendor would); the gateway runs in this process, as in a worker, recording
 * every call to llm-calls.jsonl. Side by side: a trial with job.yaml `tokens: true` (the gateway asks for ids and
 * logprobs, strips them from the reply, records them) against a direct call that asks for them itself (the same
 * upstream work), next to the plain gateway (`tokens: false`) and the plain direct call, so the second table shows
 * direct, `tokens: false` and `tokens: true` side by side from one run.
 */
import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';

import { NativeConnection, Worker } from '@temporalio/worker';

import { workflowBundle } from '../../workers/workflow-bundle';
import { ModelGateway } from '../../src/gateway/gateway';
import { upstreamsFromEnv } from '../../src/gateway/upstreams';
import { readLedger, startLedger, TemporalSpendLedgers } from '../../src/budget/ledger-client';
import { TemporalConcurrencyShares } from '../../src/limits/shared-concurrency';
import { TemporalRateLimits } from '../../src/limits/shared-rate-limits';
import { budgetLedgerId } from '../../src/budget/workflow/ledger';
import { TEST_ADDRESS, testTemporal } from '../support/temporal';

const WARMUP = 200;
const CALLS = 2000;

interface Stats {
  p50: number;
  p99: number;
}

export async function gatewayLatencyBenchmark(): Promise<void> {
  const upstream = await startUpstream();
  const { client, connection } = await testTemporal();
  const workerConnection = await NativeConnection.connect({ address: TEST_ADDRESS });
  const taskQueue = `bench-budget-${process.pid}`;
  const worker = await Worker.create({
    connection: workerConnection,
    taskQueue,
    workflowBundle: await workflowBundle(),
  });
  const running = worker.run();
  const deployment = `bench-${process.pid}`;
  const gateway = new ModelGateway({
    spendLedgers: new TemporalSpendLedgers(client),
    sharedLimits: new TemporalRateLimits(client, deployment, taskQueue),
    sharedConcurrency: new TemporalConcurrencyShares(client, deployment, taskQueue),
  });
  const agentDir = await mkdtemp(path.join(tmpdir(), 'rollout-bench-gateway-'));
  const jobName = `bench-gateway-${process.pid}-${Date.now()}`;
  try {
    const upstreams = upstreamsFromEnv({ OPENAI_BASE_URL: `${upstream.url}/s/bench/v1`, OPENAI_API_KEY: 'sk-bench' });
    const budget = { cost_usd: 1e6, tokens: 1e12 };
    await startLedger(client, { name: jobName, workflowId: `rollout-job/${jobName}`, budget }, undefined, taskQueue);
    const plain = await gateway.openTrial({ trialId: 'bench/gateway-latency', agentDir, upstreams });
    const budgeted = await gateway.openTrial({
      trialId: 'bench/gateway-latency-budget',
      agentDir: path.join(agentDir, 'budget'),
      upstreams,
      limits: { cost_usd: 1e5, tokens: 1e11, llm_calls: 1e9 },
      budget: { jobName, agentName: 'bench' },
      rateLimits: [{ match: { upstream: 'openai' }, requests_per_minute: 1_000_000, max_concurrent: 64 }],
    });
    const tokens = await gateway.openTrial({
      trialId: 'bench/gateway-latency-tokens',
      agentDir: path.join(agentDir, 'tokens'),
      upstreams,
      shaping: { tokens: true },
    });
    const direct = `${upstream.url}/s/bench/v1/chat/completions`;
    const targets: Record<'direct' | 'gateway' | 'budget' | 'directIds' | 'tokens', Target> = {
      direct: { url: direct, key: 'sk-bench' },
      directIds: { url: direct, key: 'sk-bench', extra: { return_token_ids: true, logprobs: true } },
      tokens: { url: `${(await tokens.access('127.0.0.1')).baseUrls.openai}/chat/completions`, key: tokens.token },
      gateway: { url: `${(await plain.access('127.0.0.1')).baseUrls.openai}/chat/completions`, key: plain.token },
      budget: { url: `${(await budgeted.access('127.0.0.1')).baseUrls.openai}/chat/completions`, key: budgeted.token },
    };
    const names = Object.keys(targets) as (keyof typeof targets)[];
    const rows = [
      [
        'request',
        'direct p50 ms',
        'direct p99 ms',
        'gateway p50 ms',
        'gateway p99 ms',
        'added p50 ms',
        'limits+budget+rate_limits p50 ms',
        'limits+budget+rate_limits p99 ms',
        'added p50 ms (all on)',
      ],
    ];
    const tokenRows = [
      [
        'request',
        'direct p50 ms',
        'tokens: false p50 ms',
        'tokens: false p99 ms',
        'direct+ids p50 ms',
        'tokens: true p50 ms',
        'tokens: true p99 ms',
        'added p50 ms, false',
        'added p50 ms, true',
      ],
    ];
    for (const stream of [false, true]) {
      const times = Object.fromEntries(names.map((name) => [name, [] as number[]])) as Record<
        keyof typeof targets,
        number[]
      >;
      for (let i = 0; i < WARMUP + CALLS; i++) {
        // Rotate which goes first, so none always finds another's connection warm.
        for (let j = 0; j < names.length; j++) {
          const which = names[(i + j) % names.length]!;
          const ms = await timeCall(targets[which], stream);
          if (i >= WARMUP) times[which].push(ms);
        }
      }
      const d = stats(times.direct);
      const g = stats(times.gateway);
      const b = stats(times.budget);
      rows.push([
        stream ? 'chat completions, SSE (last byte)' : 'chat completions, JSON',
        d.p50.toFixed(2),
        d.p99.toFixed(2),
        g.p50.toFixed(2),
        g.p99.toFixed(2),
        (g.p50 - d.p50).toFixed(2),
        b.p50.toFixed(2),
        b.p99.toFixed(2),
        (b.p50 - d.p50).toFixed(2),
      ]);
      const ids = stats(times.directIds);
      const t = stats(times.tokens);
      tokenRows.push([
        rows.at(-1)![0]!,
        d.p50.toFixed(2),
        g.p50.toFixed(2),
        g.p99.toFixed(2),
        ids.p50.toFixed(2),
        t.p50.toFixed(2),
        t.p99.toFixed(2),
        (g.p50 - d.p50).toFixed(2),
        (t.p50 - ids.p50).toFixed(2),
      ]);
    }
    await plain.close();
    await budgeted.close();
    await tokens.close();
    console.log(`gateway latency, ${CALLS} calls each way, interleaved (load average ${loadavg()[0]!.toFixed(1)}):`);
    console.log(table(rows));
    console.log(
      'tokens: false vs tokens: true (ids and logprobs asked, stripped, recorded), each against its direct call ' +
        '(tokens: true against a direct call asking for the ids itself):'
    );
    console.log(table(tokenRows));
    const spent = (await readLedger(client, jobName))?.spent;
    console.log(`the bench job's ledger counted ${spent?.llm_calls ?? 0} calls, ${spent?.tokens ?? 0} tokens`);
  } finally {
    await gateway.close();
    upstream.stop();
    await client.workflow
      .getHandle(budgetLedgerId(jobName))
      .terminate('benchmark over')
      .catch((err: unknown) => console.error(`the bench job's ledger was left running: ${String(err)}`));
    worker.shutdown();
    await running;
    await workerConnection.close();
    await connection.close();
    await rm(agentDir, { recursive: true, force: true });
  }
}

interface Target {
  url: string;
  key: string;
  /** Request fields added to the call (a direct call asking for token ids itself). */
  extra?: Record<string, unknown>;
}

function table(rows: string[][]): string {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  return rows.map((r) => r.map((c, i) => c.padEnd(widths[i]!)).join('  ')).join('\n');
}

async function timeCall(target: Target, stream: boolean): Promise<number> {
  const body = JSON.stringify({
    // A priced model: a job whose budget caps cost refuses calls to models it cannot price.
    model: 'gpt-5-mini',
    stream,
    messages: [{ role: 'user', content: 'say hello' }],
    ...target.extra,
  });
  const begun = process.hrtime.bigint();
  const response = await fetch(target.url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${target.key}` },
    body,
  });
  await response.arrayBuffer();
  if (response.status !== 200) throw new Error(`${target.url}: HTTP ${response.status}`);
  return Number(process.hrtime.bigint() - begun) / 1e6;
}

function stats(values: number[]): Stats {
  const sorted = [...values].sort((a, b) => a - b);
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
  return { p50: at(0.5), p99: at(0.99) };
}

/** The scripted model server in a child process; its first stdout line is `{"url":…}`. */
async function startUpstream(): Promise<{ url: string; stop: () => void }> {
  const script = path.join(__dirname, '..', 'support', 'scripted-model-server.js');
  const child = spawn(process.execPath, [script, '--host', '127.0.0.1'], { stdio: ['ignore', 'pipe', 'inherit'] });
  const lines = createInterface({ input: child.stdout });
  const first = await new Promise<string>((resolve, reject) => {
    lines.once('line', resolve);
    child.once('exit', (code) => reject(new Error(`scripted model server exited ${code}`)));
  });
  lines.close();
  const { url } = JSON.parse(first) as { url: string };
  return { url, stop: () => child.kill() };
}
