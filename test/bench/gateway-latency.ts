/**
 * The latency the model gateway adds per call: the same Chat Completions request (JSON, and SSE to the last byte)
 * sent straight to a local scripted upstream and through the gateway, interleaved call by call so load drift hits
 * both alike. The upstream runs in its own process (as a vendor would); the gateway runs in this process, as in a
 * worker, recording every call to llm-calls.jsonl.
 */
import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';

import { ModelGateway } from '../../src/gateway/gateway';
import { upstreamsFromEnv } from '../../src/gateway/upstreams';

const WARMUP = 200;
const CALLS = 2000;

interface Stats {
  p50: number;
  p99: number;
}

export async function gatewayLatencyBenchmark(): Promise<void> {
  const upstream = await startUpstream();
  const gateway = new ModelGateway();
  const agentDir = await mkdtemp(path.join(tmpdir(), 'rollout-bench-gateway-'));
  try {
    const session = await gateway.openTrial({
      trialId: 'bench/gateway-latency',
      agentDir,
      upstreams: upstreamsFromEnv({ OPENAI_BASE_URL: `${upstream.url}/s/bench/v1`, OPENAI_API_KEY: 'sk-bench' }),
    });
    const access = await session.access('127.0.0.1');
    const direct = { url: `${upstream.url}/s/bench/v1/chat/completions`, key: 'sk-bench' };
    const proxied = { url: `${access.baseUrls.openai}/chat/completions`, key: access.token };
    const rows = [['request', 'direct p50 ms', 'direct p99 ms', 'gateway p50 ms', 'gateway p99 ms', 'added p50 ms']];
    for (const stream of [false, true]) {
      const times = { direct: [] as number[], gateway: [] as number[] };
      for (let i = 0; i < WARMUP + CALLS; i++) {
        // Alternate which goes first, so neither always finds the other's connection warm.
        const order = i % 2 === 0 ? (['direct', 'gateway'] as const) : (['gateway', 'direct'] as const);
        for (const which of order) {
          const ms = await timeCall(which === 'direct' ? direct : proxied, stream);
          if (i >= WARMUP) times[which].push(ms);
        }
      }
      const d = stats(times.direct);
      const g = stats(times.gateway);
      rows.push([
        stream ? 'chat completions, SSE (last byte)' : 'chat completions, JSON',
        d.p50.toFixed(2),
        d.p99.toFixed(2),
        g.p50.toFixed(2),
        g.p99.toFixed(2),
        (g.p50 - d.p50).toFixed(2),
      ]);
    }
    await session.close();
    const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
    console.log(`gateway latency, ${CALLS} calls each way, interleaved (load average ${loadavg()[0]!.toFixed(1)}):`);
    console.log(rows.map((r) => r.map((c, i) => c.padEnd(widths[i]!)).join('  ')).join('\n'));
  } finally {
    await gateway.close();
    upstream.stop();
    await rm(agentDir, { recursive: true, force: true });
  }
}

async function timeCall(target: { url: string; key: string }, stream: boolean): Promise<number> {
  const body = JSON.stringify({
    model: 'scripted-model',
    stream,
    messages: [{ role: 'user', content: 'say hello' }],
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
