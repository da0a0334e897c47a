/**
 * The model gateway absorbing upstream faults, against the scripted model server (the stand-in for vendor APIs):
 * 429s and 529s retried at the gateway within max_wait (the agent sees a slow answer), streams too before their first
 * byte, every attempt and wait recorded; connection failures typed ApiUnreachableError; the agent hanging up while
 * the gateway waits; the adaptive concurrency limit; HTTP_PROXY / NO_PROXY toward upstreams; the preflight probe.
 */
import assert from 'node:assert/strict';
import { mkdtemp } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import { AdaptiveLimit } from '../../src/limits/adaptive-limit';
import type { TrialSession } from '../../src/gateway/gateway';
import { ModelGateway } from '../../src/gateway/gateway';
import { probeUpstream } from '../../src/gateway/probe';
import type { LlmCallRecord } from '../../src/gateway/records';
import { readCallRecords } from '../../src/gateway/records';
import { retryAfterMs } from '../../src/gateway/retry-wait';
import { upstreamsFromEnv } from '../../src/gateway/upstreams';
import type { ScriptedModelServer } from '../support/scripted-model-server';
import { startScriptedModelServer } from '../support/scripted-model-server';
import { waitFor } from '../support/wait';

const BODY = { model: 'gpt-5', messages: [{ role: 'user', content: 'go' }] };

async function records(session: TrialSession): Promise<LlmCallRecord[]> {
  await session.close();
  const out: LlmCallRecord[] = [];
  for await (const record of readCallRecords(session.callsFile)) out.push(record);
  return out;
}

describe('model gateway: upstream faults absorbed', () => {
  let scripted: ScriptedModelServer;
  let gateway: ModelGateway;
  let agentDir: string;

  before(async () => {
    scripted = await startScriptedModelServer();
    gateway = new ModelGateway({ maxWaitMs: 30_000 });
    agentDir = await mkdtemp(path.join(tmpdir(), 'rollout-gateway-faults-'));
  });
  after(async () => {
    await gateway.close();
    await scripted.close();
  });

  async function open(name: string, baseUrl: string, on = gateway) {
    const session = await on.openTrial({
      trialId: `job/${name}`,
      agentDir: path.join(agentDir, name),
      upstreams: upstreamsFromEnv({ OPENAI_BASE_URL: baseUrl, OPENAI_API_KEY: 'sk-real' }),
    });
    const access = await session.access();
    const call = (body: unknown = BODY, signal?: AbortSignal) =>
      fetch(`${access.baseUrls.openai}/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${access.token}` },
        body: JSON.stringify(body),
        signal,
      });
    return { session, call };
  }

  it('a 429 burst with retry-after: the agent gets its answer after the wait; each attempt and the wait recorded', async () => {
    const upstream = scripted.session('burst', { turns: [{ say: 'done' }] });
    scripted.faultWindow({ kind: 'rate-limit', durationMs: 1_500, retryAfterSec: 1 });
    const { session, call } = await open('burst', upstream.openAiBaseUrl);
    const res = await call();
    assert.equal(res.status, 200);
    await res.arrayBuffer();
    const [record] = await records(session);
    const statuses = record!.attempts!.map((a) => a.status);
    assert.equal(statuses.at(-1), 200);
    assert.ok(statuses.slice(0, -1).length >= 1 && statuses.slice(0, -1).every((s) => s === 429), statuses.join(', '));
    // retry-after is honoured: each wait at least the second asked for.
    assert.ok(record!.attempts!.slice(0, -1).every((a) => a.wait_ms >= 1_000));
    assert.ok(record!.waited_ms! >= 1_000);
    assert.equal(record!.error, null);
    assert.equal(session.failure(), null);
    assert.deepEqual(
      upstream.calls.map((c) => c.status),
      statuses
    );
  });

  it('a window of 529s without retry-after: backed off and retried; a stream is retried before its first byte', async () => {
    const upstream = scripted.session('overload', { turns: [{ say: 'streamed' }] });
    scripted.faultWindow({ kind: 'overloaded', durationMs: 800 });
    const { session, call } = await open('overload', upstream.openAiBaseUrl);
    const res = await call({ ...BODY, stream: true });
    assert.equal(res.status, 200);
    const text = await res.text();
    assert.match(text, /\[DONE\]/);
    assert.equal(text.match(/overloaded/i), null, 'nothing of the 529s reached the agent');
    const [record] = await records(session);
    assert.equal(
      (record!.response as { choices: { message: { content: string } }[] }).choices[0]!.message.content,
      'streamed'
    );
    assert.ok(record!.attempts!.length >= 2);
    assert.equal(record!.attempts![0]!.status, 529);
    assert.equal(record!.status, 200);
    assert.equal(record!.stream, true);
  });

  it('connection refused and an unknown host: a few quick attempts, then ApiUnreachableError (502 to the agent)', async () => {
    const closed = http.createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const port = (closed.address() as AddressInfo).port;
    await new Promise<void>((resolve) => closed.close(() => resolve()));
    for (const [name, baseUrl] of [
      ['refused', `http://127.0.0.1:${port}/v1`],
      ['no-such-host', 'http://rollout-no-such-host.invalid/v1'],
    ] as const) {
      const { session, call } = await open(name, baseUrl);
      const res = await call();
      assert.equal(res.status, 502);
      await res.arrayBuffer();
      const [record] = await records(session);
      assert.equal(record!.error?.type, 'ApiUnreachableError');
      assert.equal(session.failure()?.type, 'ApiUnreachableError');
      assert.equal(record!.attempts!.length, 3);
      assert.ok(record!.attempts!.every((a) => a.status === 0 && a.error));
    }
  });

  it('the agent hanging up while the gateway waits: the call ends at once, failed for the reason it waited', async () => {
    const upstream = scripted.session('hang-up', { turns: [{ say: 'done' }] });
    scripted.faultWindow({ kind: 'rate-limit', durationMs: 60_000, retryAfterSec: 30 });
    const { session, call } = await open('hang-up', upstream.openAiBaseUrl);
    const abort = new AbortController();
    const pending = call(BODY, abort.signal).catch((err: unknown) => err);
    await waitFor('the first attempt', () => upstream.calls.length >= 1, 10_000);
    abort.abort();
    await pending;
    scripted.faultWindow({ kind: 'rate-limit', durationMs: 0 });
    await waitFor('the call record', () => session.usage().calls === 1, 10_000);
    const [record] = await records(session);
    assert.equal(record!.error?.type, 'ApiRateLimitError');
    assert.equal(session.failure()?.type, 'ApiRateLimitError');
    assert.equal(upstream.calls.length, 1);
  });

  it('adaptive concurrency: halved once per round of rate-limited replies, grows back, queues first come first served', async () => {
    const limit = new AdaptiveLimit({ initial: 4, min: 1, max: 8 });
    const signal = new AbortController().signal;
    const permits = await Promise.all([1, 2, 3, 4].map(() => limit.acquire(signal)));
    const order: number[] = [];
    const queued = [5, 6].map((n) => limit.acquire(signal).then((p) => (order.push(n), p)));
    assert.deepEqual(limit.state(), { limit: 4, inFlight: 4, waiting: 2 });
    // Four replies of one round were rate-limited: one cut, not four.
    for (const permit of permits) limit.release(permit, true);
    assert.equal(limit.state().limit, 2);
    const next = await Promise.all(queued);
    assert.deepEqual(order, [5, 6]);
    for (const permit of next) limit.release(permit, false);
    assert.ok(limit.state().limit >= 2);
    for (let i = 0; i < 40; i++) limit.release(await limit.acquire(signal), false);
    assert.equal(limit.state().limit, 8);
    const gone = new AbortController();
    const held = await Promise.all(Array.from({ length: 8 }, () => limit.acquire(signal)));
    const waiting = limit.acquire(gone.signal);
    gone.abort();
    await assert.rejects(waiting, /went away/);
    for (const permit of held) limit.release(permit, false);
    assert.equal(limit.state().waiting, 0);
  });

  it('retry-after as seconds, as an HTTP date and as retry-after-ms', () => {
    const now = Date.parse('2026-11-25T12:00:00Z');
    assert.equal(retryAfterMs({ 'retry-after': '3' }, now), 3_000);
    assert.equal(retryAfterMs({ 'retry-after': 'Wed, 25 Nov 2026 12:00:05 GMT' }, now), 5_000);
    assert.equal(retryAfterMs({ 'retry-after-ms': '250', 'retry-after': '1' }, now), 250);
    assert.equal(retryAfterMs({}, now), null);
  });

  it('follows HTTP_PROXY toward upstreams, and NO_PROXY past it', async () => {
    const seen: string[] = [];
    // A forward proxy: requests arrive in absolute form and are passed on as they are.
    const proxy = http.createServer((req, res) => {
      seen.push(req.url ?? '');
      const out = http.request(req.url!, { method: req.method, headers: req.headers }, (upstreamRes) => {
        res.writeHead(upstreamRes.statusCode ?? 502, upstreamRes.headers);
        upstreamRes.pipe(res);
      });
      req.pipe(out);
    });
    await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
    const saved = { HTTP_PROXY: process.env.HTTP_PROXY, NO_PROXY: process.env.NO_PROXY };
    const viaProxy = new ModelGateway();
    try {
      process.env.HTTP_PROXY = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`;
      process.env.NO_PROXY = '';
      const upstream = scripted.session('proxied', { turns: [{ say: 'done' }] });
      const proxied = await open('proxied', upstream.openAiBaseUrl, viaProxy);
      assert.equal((await proxied.call()).status, 200);
      assert.ok(
        seen.some((url) => url.startsWith(`${upstream.openAiBaseUrl}/chat/completions`)),
        seen.join(', ')
      );
      assert.equal((await probeUpstream('openai', { baseUrl: upstream.openAiBaseUrl, apiKey: 'k' })).ok, true);
      assert.ok(
        seen.some((url) => url.endsWith('/v1/models')),
        'the preflight probe went through the proxy too'
      );
      const count = seen.length;
      process.env.NO_PROXY = '127.0.0.1';
      const direct = await open('direct', upstream.openAiBaseUrl, viaProxy);
      assert.equal((await direct.call()).status, 200);
      assert.equal(seen.length, count);
      await proxied.session.close();
      await direct.session.close();
    } finally {
      for (const [key, value] of Object.entries(saved)) {
        if (value === undefined) delete process.env[key];
        else process.env[key] = value;
      }
      await viaProxy.close();
      proxy.close();
    }
  });

  it('preflight probe: a model list answers; a rejected key and an unreachable upstream say so', async () => {
    const ok = scripted.session('probe-ok', { turns: [] });
    const rejected = scripted.session('probe-rejected', { turns: [], fault: { kind: 'auth' } });
    assert.deepEqual(await probeUpstream('anthropic', { baseUrl: ok.baseUrl, apiKey: 'k' }), { ok: true, status: 200 });
    assert.equal(ok.calls[0]?.credential, 'k');
    const refused = await probeUpstream('openai', { baseUrl: rejected.openAiBaseUrl, apiKey: 'bad' });
    assert.deepEqual(refused, { ok: false, reason: 'rejected', detail: 'HTTP 401' });
    const unreachable = await probeUpstream('gemini', { baseUrl: 'http://rollout-no-such-host.invalid', apiKey: 'k' });
    assert.equal(unreachable.ok, false);
    assert.equal(!unreachable.ok && unreachable.reason, 'unreachable');
  });
});
