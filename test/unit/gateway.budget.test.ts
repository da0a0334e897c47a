/**
 * A hostile agent against its trial's limits, through the gateway, against the scripted model server (the stand-in
 * for vendor APIs): usage is asked for on every stream (and the chunk the agent did not ask for is not passed on), a
 * stream cut or a call the agent hangs up on is charged its conservative estimate, a call still under way when the
 * step ends is counted before the session's close returns, a model without a price is refused under a cost cap, and
 * many calls at once are all admitted against what the calls in flight may cost: the spend passes the limit by at most
 * one call. The job's budget across a real ledger and real jobs: e2e.budget.test.ts.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import { conservativeUsage } from '../../src/gateway/charge';
import type { TrialSession } from '../../src/gateway/gateway';
import { ModelGateway } from '../../src/gateway/gateway';
import type { LlmCallRecord } from '../../src/gateway/records';
import { readCallRecords } from '../../src/gateway/records';
import type { TrialLimits } from '../../src/budget/workflow/spend';
import { upstreamsFromEnv } from '../../src/gateway/upstreams';
import type { Scenario, ScriptedModelServer } from '../support/scripted-model-server';
import { scriptedUsage, startScriptedModelServer } from '../support/scripted-model-server';
import { waitFor, within } from '../support/wait';

const KEY = `sk-openai-${randomBytes(8).toString('hex')}`;
const SCENARIO: Scenario = { turns: [{ say: 'done' }] };
/** A call whose estimate is above what the scripted server says it used (1000 input tokens, whatever the request). */
const CHAT = {
  model: 'gpt-5',
  stream: true,
  max_tokens: 50,
  messages: [{ role: 'user', content: `go ${'x'.repeat(4000)}` }],
};
/** The same call on the Completions route (vLLM, SGLang: a text prompt). */
const COMPLETION = { model: 'gpt-5', stream: true, max_tokens: 50, prompt: `go ${'x'.repeat(4000)}` };
/** What one CHAT call is held at and charged when its usage does not come back (the gateway's estimate). */
const UPSTREAM_CHAT = { ...CHAT, stream_options: { include_usage: true } };
const ESTIMATE = conservativeUsage(Buffer.byteLength(JSON.stringify(UPSTREAM_CHAT)), UPSTREAM_CHAT);
const CHARGE = ESTIMATE.input_tokens + ESTIMATE.output_tokens;
const USAGE = scriptedUsage(0).input_tokens + scriptedUsage(0).output_tokens;

function post(url: string, body: unknown, token: string, signal?: AbortSignal): Promise<Response> {
  return fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
    body: JSON.stringify(body),
    ...(signal ? { signal } : {}),
  });
}

/** The session's records, once it is closed (every record on disk). */
async function records(session: TrialSession): Promise<LlmCallRecord[]> {
  await session.close();
  const out: LlmCallRecord[] = [];
  for await (const record of readCallRecords(session.callsFile)) out.push(record);
  return out;
}

describe('gateway: limits against a hostile agent (scripted model server)', () => {
  let gateway: ModelGateway;
  let scripted: ScriptedModelServer;
  let agentDir: string;
  const opened: TrialSession[] = [];

  before(async () => {
    gateway = new ModelGateway({ maxWaitMs: 2_000 });
    scripted = await startScriptedModelServer();
    agentDir = await mkdtemp(path.join(tmpdir(), 'rollout-gateway-budget-'));
  });
  after(async () => {
    for (const session of opened) await session.close();
    await gateway.close();
    await scripted.close();
  });

  async function trial(name: string, scenario: Scenario, limits: TrialLimits) {
    const upstream = scripted.session(name, scenario);
    const session = await gateway.openTrial({
      trialId: `job/${name}`,
      agentDir: path.join(agentDir, name),
      upstreams: upstreamsFromEnv({ OPENAI_API_KEY: KEY, OPENAI_BASE_URL: upstream.openAiBaseUrl }),
      limits,
    });
    opened.push(session);
    const access = await session.access();
    return { session, upstream, url: `${access.baseUrls.openai}/chat/completions`, token: access.token };
  }

  it('a stream without stream_options: usage asked for upstream and counted; the agent sees no usage chunk', async () => {
    const t = await trial('usage', SCENARIO, { tokens: 10 ** 9 });
    const text = await (await post(t.url, CHAT, t.token)).text();
    assert.match(text, /\[DONE\]/);
    assert.doesNotMatch(text, /"usage"/, 'the usage chunk it did not ask for is not passed on');
    const sent = t.upstream.calls[0]!.requestBody as { stream_options?: { include_usage?: unknown } };
    assert.equal(sent.stream_options?.include_usage, true);
    assert.equal(t.session.spend().tokens, USAGE);
    // An agent that asks for usage itself gets its chunk, and nothing is added.
    const asked = await (await post(t.url, { ...CHAT, stream_options: { include_usage: true } }, t.token)).text();
    assert.match(asked, /"usage"/);
    assert.equal(t.session.spend().tokens, 2 * USAGE);
    const [first, second] = await records(t.session);
    assert.deepEqual(first!.added, ['stream_options.include_usage']);
    assert.equal(first!.charged, undefined);
    assert.equal(second!.added, undefined);
  });

  it('a Completions stream: usage asked for upstream and counted, the chunk not passed on; no usage back: charged its estimate', async () => {
    const t = await trial('completions-usage', SCENARIO, { tokens: 10 ** 9 });
    const url = t.url.replace(/\/chat\/completions$/, '/completions');
    const text = await (await post(url, COMPLETION, t.token)).text();
    assert.match(text, /\[DONE\]/);
    assert.doesNotMatch(text, /"usage"/, 'the usage chunk it did not ask for is not passed on');
    const sent = t.upstream.calls[0]!.requestBody as { stream_options?: { include_usage?: unknown } };
    assert.equal(sent.stream_options?.include_usage, true);
    assert.equal(t.session.spend().tokens, USAGE);
    const [call] = await records(t.session);
    assert.equal(call!.dialect, 'openai-completions');
    assert.deepEqual(call!.added, ['stream_options.include_usage']);
    assert.deepEqual(call!.usage, scriptedUsage(0));
    assert.equal(call!.charged, undefined);
    // A server that ignores stream_options: the stream ends whole but without usage, and counts as its estimate.
    const u = await trial('completions-no-usage', { ...SCENARIO, streamUsage: false }, { tokens: 10 ** 9 });
    const bare = await (await post(u.url.replace(/\/chat\/completions$/, '/completions'), COMPLETION, u.token)).text();
    assert.match(bare, /\[DONE\]/);
    const upstreamCompletion = { ...COMPLETION, stream_options: { include_usage: true } };
    const estimate = conservativeUsage(Buffer.byteLength(JSON.stringify(upstreamCompletion)), upstreamCompletion);
    assert.equal(u.session.spend().tokens, estimate.input_tokens + estimate.output_tokens);
    const [uncounted] = await records(u.session);
    assert.deepEqual(uncounted!.charged, estimate);
  });

  it('a stream cut mid-way is charged its estimate (input from its size plus its max_tokens)', async () => {
    const t = await trial('cut', { ...SCENARIO, fault: { kind: 'stream-cut' } }, { tokens: 10 ** 9 });
    await post(t.url, CHAT, t.token)
      .then((res) => res.text())
      .catch(() => 'cut');
    await waitFor('the cut call recorded', () => t.session.spend().llm_calls === 1, 30_000);
    assert.equal(t.session.spend().tokens, CHARGE);
    const [call] = await records(t.session);
    assert.deepEqual(call!.charged, ESTIMATE);
  });

  it('a call under way when the step ends: the close waits, cuts it and charges it before it returns', async () => {
    const t = await trial('gone', { ...SCENARIO, fault: { kind: 'stall' } }, { tokens: 10 ** 9 });
    const hanging = post(t.url, CHAT, t.token)
      .then((res) => res.text())
      .catch(() => 'cut');
    await waitFor('the call upstream', () => t.upstream.calls.length === 1, 30_000);
    await t.session.close();
    assert.equal(t.session.spend().tokens, CHARGE, 'counted before the close returned');
    await hanging;
    // The agent hangs up on a stalled call itself: charged too.
    const u = await trial('hang-up', { ...SCENARIO, fault: { kind: 'stall' } }, { tokens: 10 ** 9 });
    const abort = new AbortController();
    const call = post(u.url, CHAT, u.token, abort.signal).catch(() => null);
    await waitFor('the call upstream', () => u.upstream.calls.length === 1, 30_000);
    abort.abort();
    await call;
    await waitFor('the abandoned call recorded', () => u.session.spend().llm_calls === 1, 30_000);
    assert.equal(u.session.spend().tokens, CHARGE);
  });

  it('a model without a price under a cost cap: refused with a clear 402, recorded, never sent upstream', async () => {
    const t = await trial('unpriced', SCENARIO, { cost_usd: 1 });
    const refused = await post(t.url, { ...CHAT, model: 'mystery-model-9' }, t.token);
    assert.equal(refused.status, 402);
    assert.match(await refused.text(), /no price for model \\"mystery-model-9\\".*cost_usd cap cannot bound it/);
    assert.equal(t.upstream.calls.length, 0);
    assert.equal(t.session.refusal()?.kind, 'trial_limit');
    const [call] = await records(t.session);
    assert.equal(call!.refused, 'trial_limit');
  });

  it('many calls at once against a token limit: all admitted against what the calls in flight may cost, over it by at most one call', async () => {
    const limit = 3 * USAGE + 10;
    const t = await trial('burst', { ...SCENARIO, replyDelayMs: 300 }, { tokens: limit });
    const statuses = await Promise.all(
      Array.from({ length: 12 }, () => post(t.url, CHAT, t.token).then(async (res) => (await res.text(), res.status)))
    );
    const spent = t.session.spend();
    assert.ok(spent.tokens >= limit, `spent ${spent.tokens} of ${limit}`);
    assert.ok(spent.tokens < limit + USAGE, `spent ${spent.tokens}: over ${limit} by more than one call`);
    assert.equal(t.upstream.calls.length, 4, 'four calls went upstream');
    assert.equal(
      statuses.filter((status) => status === 402).length,
      8,
      `the others were refused: ${statuses.join(' ')}`
    );
    const calls = await records(t.session);
    assert.equal(calls.filter((call) => call.refused === 'trial_limit').length, 8);
  });

  it("a job's agent holding its upstream slots with a stalled call does not hold up another job's calls (adaptive limit per job)", async () => {
    const narrow = new ModelGateway({ maxWaitMs: 2_000, adaptiveLimit: { initial: 1, min: 1, max: 1 } });
    const stalled = scripted.session('slot-holder', { ...SCENARIO, fault: { kind: 'stall' } });
    const other = scripted.session('slot-other', SCENARIO);
    const open = async (job: string, name: string, baseUrl: string) => {
      const session = await narrow.openTrial({
        trialId: `${job}/${name}`,
        jobName: job,
        agentDir: path.join(agentDir, name),
        upstreams: upstreamsFromEnv({ OPENAI_API_KEY: KEY, OPENAI_BASE_URL: baseUrl }),
      });
      const access = await session.access();
      return { session, url: `${access.baseUrls.openai}/chat/completions`, token: access.token };
    };
    try {
      const hostile = await open('job-a', 'slot-holder', stalled.openAiBaseUrl);
      const abort = new AbortController();
      const held = post(hostile.url, CHAT, hostile.token, abort.signal).catch(() => null);
      await waitFor('the stalled call upstream', () => stalled.calls.length === 1, 30_000);
      // Within job-a its one slot is taken: its next call waits at the gateway.
      const waiting = scripted.session('slot-queued', SCENARIO);
      const queued = await open('job-a', 'slot-queued', waiting.openAiBaseUrl);
      const waited = post(queued.url, CHAT, queued.token);
      // Same upstream origin, one slot: the other job's call goes all the same.
      const neighbour = await open('job-b', 'slot-other', other.openAiBaseUrl);
      const answered = await within(30_000, "the other job's call", post(neighbour.url, CHAT, neighbour.token));
      assert.equal(answered.status, 200, await answered.text());
      assert.equal(waiting.calls.length, 0, "job-a's second call still waits for its job's slot");
      abort.abort();
      await held;
      assert.equal((await waited).status, 200, 'it went once the slot was free');
      assert.equal(waiting.calls.length, 1);
      await hostile.session.close();
      await neighbour.session.close();
      await queued.session.close();
    } finally {
      await narrow.close();
    }
  });
});
