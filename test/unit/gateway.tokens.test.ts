/**
 * Training-grade tokens through the model gateway, against the scripted model server answering as vLLM does when
 * asked for token ids (a stand-in: test/support/vllm-tokens.ts): `tokens: true` adds vLLM's parameters and strips what
 * they bring from the agent's reply (JSON and SSE), records prompt and completion ids and logprobs; `sampling` is what
 * the server receives; `X-Session-ID` is the trial's id; `replicas` pin each trial to one server and move it off a
 * dead one; the policy version is stamped per call. The exact RL export of such calls: export.tokens.test.ts.
 */
import assert from 'node:assert/strict';
import { mkdtemp } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import type { TrialSession, TrialSessionOptions } from '../../src/gateway/gateway';
import { ModelGateway } from '../../src/gateway/gateway';
import type { LlmCallRecord } from '../../src/gateway/records';
import { readCallRecords } from '../../src/gateway/records';
import { upstreamsFromEnv } from '../../src/gateway/upstreams';
import { PreflightError, probeUpstreams } from '../../src/job/preflight';
import type { TokenView } from '../../src/export/token-view';
import { TokenViewBuilder } from '../../src/export/token-view';
import type { Scenario, ScriptedModelServer } from '../support/scripted-model-server';
import { startScriptedModelServer } from '../support/scripted-model-server';
import { chatCompletionIds, chatPromptIds, tokenLogprob } from '../support/vllm-tokens';
import { tokenizeText } from '../support/vllm-completions';

// The assertions read vendor wire JSON by path.
/* eslint-disable @typescript-eslint/no-unsafe-member-access, @typescript-eslint/no-unsafe-assignment, @typescript-eslint/no-unsafe-argument */
type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

const SCENARIO: Scenario = {
  turns: [{ shell: 'ls' }, { shell: 'cat a.txt' }, { say: 'done' }],
};
const BASH = {
  type: 'function',
  function: { name: 'bash', parameters: { type: 'object', properties: { command: { type: 'string' } } } },
};

/** The trial's generation records, once there are as many as calls the server answered (each is written as its call ends). */
async function records(session: TrialSession, upstreamCalls?: number): Promise<LlmCallRecord[]> {
  const want = upstreamCalls ?? 0;
  for (let waited = 0; ; waited += 20) {
    const out: LlmCallRecord[] = [];
    for await (const record of readCallRecords(session.callsFile)) if (record.kind === 'generate') out.push(record);
    if (out.length >= want || waited > 5_000) return out;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** The reply of a chat call, streamed or not, as the agent's SDK would see it (chunks kept for inspection). */
async function chat(session: TrialSession, body: Json): Promise<{ message: Json; raw: Json[] }> {
  const access = session.accessAt(await gatewayUrl);
  const res = await fetch(`${access.baseUrls.openai}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${access.token}` },
    body: JSON.stringify({ model: 'Qwen/Qwen3-8B', tools: [BASH], ...body }),
  });
  assert.equal(res.status, 200, await res.clone().text());
  if (body.stream !== true) {
    const json = (await res.json()) as Json;
    return { message: json.choices[0].message, raw: [json] };
  }
  const raw = (await res.text())
    .split('\n\n')
    .map((block) => block.replace(/^data: /, ''))
    .filter((data) => data.startsWith('{'))
    .map((data) => JSON.parse(data) as Json);
  let content = '';
  const calls: Json[] = [];
  for (const chunk of raw) {
    const delta = chunk.choices?.[0]?.delta ?? {};
    content += delta.content ?? '';
    for (const part of delta.tool_calls ?? []) {
      const call = (calls[part.index] ??= { id: '', type: 'function', function: { name: '', arguments: '' } });
      if (part.id) call.id = part.id;
      call.function.name += part.function?.name ?? '';
      call.function.arguments += part.function?.arguments ?? '';
    }
  }
  return {
    message: { role: 'assistant', content: content || null, ...(calls.length ? { tool_calls: calls } : {}) },
    raw,
  };
}

/** A multi-turn agent loop: the conversation grows by each reply and a tool result. */
async function agentLoop(session: TrialSession, stream: boolean, turns: number): Promise<Json[]> {
  const messages: Json[] = [
    { role: 'system', content: 'You are a careful agent.' },
    { role: 'user', content: 'List the files, then read a.txt.' },
  ];
  for (let turn = 0; turn < turns; turn++) {
    const { message } = await chat(session, { messages, stream });
    messages.push(message);
    const call = message.tool_calls?.[0];
    if (!call) break;
    messages.push({ role: 'tool', tool_call_id: call.id, content: `output of turn ${turn}\na.txt b.txt` });
  }
  return messages;
}

function tokenView(calls: LlmCallRecord[]): TokenView {
  const builder = new TokenViewBuilder();
  for (const call of calls) builder.add(call);
  return builder.view();
}

/** Every call's prompt is its segment so far plus what was inserted; logprobs align with the mask's 1s. */
function assertExact(view: TokenView, calls: LlmCallRecord[], logprobs = true): void {
  for (const segment of view.segments) {
    assert.equal(segment.response_ids.length, segment.loss_mask.length);
    if (logprobs) assert.equal(segment.logprobs!.length, segment.loss_mask.filter((m) => m === 1).length);
    for (const [i, entry] of segment.calls.entries()) {
      const call = calls.find((c) => c.seq === entry.seq)!;
      // The segment up to this call's sampled tokens is exactly the prompt the server saw.
      assert.deepEqual(
        [...segment.prompt_ids, ...segment.response_ids.slice(0, entry.response_start)],
        call.prompt_token_ids
      );
      assert.deepEqual(segment.response_ids.slice(entry.response_start, entry.response_end), call.completion_token_ids);
      assert.ok(segment.loss_mask.slice(entry.response_start, entry.response_end).every((m) => m === 1));
      const before = i === 0 ? 0 : segment.calls[i - 1]!.response_end;
      assert.ok(segment.loss_mask.slice(before, entry.response_start).every((m) => m === 0));
    }
  }
}

let gatewayUrl: Promise<string>;

/** A POST through the gateway as an agent's SDK makes it: the JSON reply, or a stream's JSON events. */
async function post(session: TrialSession, route: string, body: Json): Promise<Json[]> {
  const access = session.accessAt(await gatewayUrl);
  const res = await fetch(`${access.baseUrls.openai}${route}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${access.token}` },
    body: JSON.stringify({ model: 'Qwen/Qwen3-8B', ...body }),
  });
  assert.equal(res.status, 200, await res.clone().text());
  if (body.stream !== true) return [(await res.json()) as Json];
  return (await res.text())
    .split('\n\n')
    .map((block) => block.replace(/^(event: .*\n)?data: /, ''))
    .filter((data) => data.startsWith('{'))
    .map((data) => JSON.parse(data) as Json);
}

/** Every key anywhere in a JSON value (to show a reply holds no token fields at any depth). */
function keysOf(value: unknown, into = new Set<string>()): Set<string> {
  if (Array.isArray(value)) for (const v of value) keysOf(v, into);
  else if (value && typeof value === 'object')
    for (const [k, v] of Object.entries(value)) {
      if (v !== null && !(Array.isArray(v) && v.length === 0)) into.add(k);
      keysOf(v, into);
    }
  return into;
}

describe('gateway: tokens, sampling, session id, replicas, policy version (scripted vLLM stand-in)', () => {
  let gateway: ModelGateway;
  let scripted: ScriptedModelServer;
  let agentDir: string;
  const opened: TrialSession[] = [];

  before(async () => {
    gateway = new ModelGateway({ maxWaitMs: 2_000 });
    gatewayUrl = gateway.urlFor('127.0.0.1');
    scripted = await startScriptedModelServer();
    agentDir = await mkdtemp(path.join(tmpdir(), 'rollout-tokens-'));
  });
  after(async () => {
    for (const session of opened) await session.close();
    await gateway.close();
    await scripted.close();
  });

  async function open(name: string, options: Partial<TrialSessionOptions> = {}) {
    const upstream = scripted.session(name, SCENARIO);
    const session = await gateway.openTrial({
      trialId: `job/${name}`,
      agentDir: path.join(agentDir, name),
      upstreams: upstreamsFromEnv({ OPENAI_API_KEY: 'sk-real', OPENAI_BASE_URL: upstream.openAiBaseUrl }),
      ...options,
    });
    opened.push(session);
    return { session, upstream };
  }

  for (const stream of [false, true]) {
    it(`tokens: true (${stream ? 'SSE' : 'JSON'}): ids and logprobs recorded, the agent's reply as without them`, async () => {
      const { session, upstream } = await open(`tokens-${stream}`, { shaping: { tokens: true } });
      const messages = await agentLoop(session, stream, 3);
      assert.equal(messages.filter((m) => m.role === 'assistant').length, 3);

      // The server was asked for ids and logprobs on every call; the agent saw none of them.
      for (const call of upstream.calls) {
        assert.equal((call.requestBody as Json).return_token_ids, true);
        assert.equal((call.requestBody as Json).logprobs, true);
        assert.equal(call.sessionHeader, `job/tokens-${stream}`);
      }
      const calls = await records(session, upstream.calls.length);
      assert.equal(calls.length, 3);
      for (const [i, call] of calls.entries()) {
        const request = upstream.calls[i]!.requestBody as Json;
        assert.deepEqual(call.prompt_token_ids, chatPromptIds(request));
        const reply = (call.response as Json).choices[0].message;
        assert.deepEqual(call.completion_token_ids, chatCompletionIds(reply));
        assert.deepEqual(call.logprobs, call.completion_token_ids.map(tokenLogprob));
        // Usage is asked for on every stream too (budgets count it).
        const usage = stream ? ['stream_options.include_usage'] : [];
        assert.deepEqual(call.added, [...usage, 'return_token_ids', 'logprobs']);
      }
      // The agent's own view: no ids, no logprobs, in any chunk.
      const { raw } = await chat(session, { messages: messages.slice(0, 2), stream });
      for (const payload of raw) {
        assert.equal(payload.prompt_token_ids, undefined);
        for (const choice of payload.choices ?? []) {
          assert.equal(choice.token_ids, undefined);
          assert.ok(choice.logprobs === undefined || choice.logprobs === null);
        }
      }
    });
  }

  for (const stream of [false, true]) {
    it(`Completions (${stream ? 'SSE' : 'JSON'}): ids and logprobs recorded and stripped; a token-in loop is exact`, async () => {
      const { session, upstream } = await open(`completions-${stream}`, { shaping: { tokens: true } });
      const chatml =
        '<|im_start|>system\nYou are a careful agent.<|im_end|>\n<|im_start|>user\nList the files.<|im_end|>\n<|im_start|>assistant\n';
      // An agent that asks for nothing: the server is asked for ids and logprobs, the agent sees neither.
      const plain = await post(session, '/completions', { prompt: chatml, stream });
      assert.ok(!['token_ids', 'prompt_token_ids', 'token_logprobs'].some((k) => keysOf(plain).has(k)));
      assert.equal((upstream.calls[0]!.requestBody as Json).return_token_ids, true);
      assert.equal((upstream.calls[0]!.requestBody as Json).logprobs, 0);
      // A token-in agent (it asks for ids itself; they reach it): each prompt is the previous prompt, the completion
      // and the turn the environment inserted, as ids.
      let prompt = tokenizeText(chatml);
      for (let turn = 0; turn < 2; turn++) {
        const events = await post(session, '/completions', { prompt, stream, return_token_ids: true });
        const ids = events.flatMap((e) => (e.choices?.[0]?.token_ids ?? []) as number[]);
        assert.ok(ids.length > 0);
        assert.ok(!keysOf(events).has('token_logprobs'), 'logprobs the agent did not ask for are stripped');
        prompt = [
          ...prompt,
          ...ids,
          ...tokenizeText(`\n<|im_start|>user\noutput ${turn}<|im_end|>\n<|im_start|>assistant\n`),
        ];
      }
      const calls = await records(session, 3);
      assert.equal(calls.length, 3);
      // Usage is asked for on every stream too (budgets count it).
      const usage = stream ? ['stream_options.include_usage'] : [];
      assert.deepEqual(calls[0]!.added, [...usage, 'return_token_ids', 'logprobs']);
      assert.deepEqual(calls[1]!.added, [...usage, 'logprobs']);
      for (const call of calls) {
        assert.equal(call.dialect, 'openai-completions');
        assert.equal(call.logprobs!.length, call.completion_token_ids!.length);
        assert.deepEqual(call.logprobs, call.completion_token_ids!.map(tokenLogprob));
      }
      const view = tokenView(calls.slice(1));
      assert.equal(view.segments.length, 1);
      assertExact(view, calls.slice(1));
    });

    it(`Responses (${stream ? 'SSE' : 'JSON'}): vLLM's response messages and logprobs recorded, the agent's reply as without them`, async () => {
      const { session, upstream } = await open(`responses-${stream}`, { shaping: { tokens: true } });
      const tools = [{ type: 'function', name: 'bash', parameters: BASH.function.parameters }];
      const input: Json[] = [{ type: 'message', role: 'user', content: 'List the files, then read a.txt.' }];
      for (let turn = 0; turn < 3; turn++) {
        const events = await post(session, '/responses', { instructions: 'Be careful.', input, tools, stream });
        for (const key of ['input_messages', 'output_messages', 'logprobs']) assert.ok(!keysOf(events).has(key), key);
        const response = stream ? events.find((e) => e.type === 'response.completed')!.response : events[0]!;
        const output = response.output as Json[];
        input.push(...output);
        const call = output.find((item) => item.type === 'function_call');
        if (!call) break;
        input.push({ type: 'function_call_output', call_id: call.call_id, output: `output of turn ${turn}` });
      }
      for (const call of upstream.calls) {
        assert.equal((call.requestBody as Json).enable_response_messages, true);
        assert.deepEqual((call.requestBody as Json).include, ['message.output_text.logprobs']);
      }
      const calls = await records(session, 3);
      assert.equal(calls.length, 3);
      for (const call of calls) {
        assert.equal(call.dialect, 'openai-responses');
        assert.deepEqual(call.added, ['enable_response_messages', 'message.output_text.logprobs']);
        assert.ok(call.prompt_token_ids!.length > 0 && call.completion_token_ids!.length > 0);
      }
      // vLLM gives logprobs on text only: the tool-call turns have ids without them, the final text turn has both.
      assert.deepEqual(
        calls.map((c) => c.logprobs?.length ?? 0),
        [0, 0, calls[2]!.completion_token_ids!.length]
      );
      const view = tokenView(calls);
      assert.equal(view.segments.length, 1);
      assert.equal(view.segments[0]!.logprobs, null);
      assertExact({ ...view, segments: view.segments.map((s) => ({ ...s, logprobs: [] })) }, calls, false);
    });
  }

  it('exact token view: a multi-turn trial is one segment; a compacted context starts a second, and says why', async () => {
    const { session } = await open('view', { shaping: { tokens: true } });
    const messages = await agentLoop(session, true, 3);
    const whole = await records(session, 3);
    const view = tokenView(whole);
    assert.equal(view.segments.length, 1);
    assert.deepEqual(
      view.segments[0]!.calls.map((c) => c.seq),
      whole.map((c) => c.seq)
    );
    assertExact(view, whole);
    // Tool results and turn markers between calls are masked out.
    assert.ok(view.segments[0]!.loss_mask.includes(0));

    // The agent compacts: its history becomes a summary, and it goes on from there.
    const compacted = [messages[0]!, { role: 'user', content: 'Summary so far: listed files, read a.txt. Go on.' }];
    await chat(session, { messages: compacted, stream: false });
    const after = await records(session, 4);
    const split = tokenView(after);
    assert.equal(split.segments.length, 2);
    assert.deepEqual(split.splits, { history_rewritten: 1 });
    assert.equal(split.segments[1]!.split, 'history_rewritten');
    assertExact(split, after);
  });

  it('an agent that asked for logprobs itself keeps them; ids it did not ask for are stripped', async () => {
    const { session } = await open('own-logprobs', { shaping: { tokens: true } });
    const { raw } = await chat(session, { messages: [{ role: 'user', content: 'go' }], logprobs: true });
    assert.ok(raw[0]!.choices[0].logprobs.content.length > 0);
    assert.equal(raw[0]!.choices[0].token_ids, undefined);
    const [call] = await records(session, 1);
    assert.deepEqual(call!.added, ['return_token_ids']);
  });

  it('sampling is what the server receives, whatever the agent sent; both are recorded', async () => {
    const sampling = { temperature: 1, top_p: 1, max_tokens: 512 };
    const { session, upstream } = await open('sampling', { shaping: { tokens: false, sampling } });
    await chat(session, { messages: [{ role: 'user', content: 'go' }], temperature: 0.2, max_completion_tokens: 64 });
    const sent = upstream.calls[0]!.requestBody as Json;
    assert.equal(sent.temperature, 1);
    assert.equal(sent.top_p, 1);
    // The agent capped with max_completion_tokens: the enforced cap goes there (it wins upstream).
    assert.equal(sent.max_completion_tokens, 512);
    const [call] = await records(session, 1);
    assert.deepEqual(call!.sampling, {
      enforced: sampling,
      agent: { temperature: 0.2, top_p: null, max_completion_tokens: 64 },
    });
  });

  it('X-Session-ID: constant within a trial, distinct across trials (also without tokens)', async () => {
    const a = await open('session-a');
    const b = await open('session-b');
    for (const { session } of [a, b, a]) await chat(session, { messages: [{ role: 'user', content: 'go' }] });
    assert.deepEqual(
      a.upstream.calls.map((c) => c.sessionHeader),
      ['job/session-a', 'job/session-a']
    );
    assert.deepEqual(
      b.upstream.calls.map((c) => c.sessionHeader),
      ['job/session-b']
    );
  });

  it('replicas: trials spread evenly, each pinned to one; a dead replica’s trial moves, with a note', async () => {
    const r1 = scripted.session('replica-1', SCENARIO);
    const r2 = scripted.session('replica-2', SCENARIO);
    const replicas = [r1.openAiBaseUrl, r2.openAiBaseUrl];
    const trials = await Promise.all(['p1', 'p2', 'p3', 'p4'].map((name) => open(name, { replicas })));
    for (const { session } of trials) await agentLoop(session, false, 2);
    const byReplica = (url: string) =>
      new Set([...r1.calls, ...r2.calls].filter((c) => url.includes(c.session)).map((c) => c.sessionHeader));
    assert.equal(byReplica(r1.openAiBaseUrl).size, 2);
    assert.equal(byReplica(r2.openAiBaseUrl).size, 2);
    for (const { session } of trials) {
      const used = new Set((await records(session, 2)).map((r) => r.replica));
      assert.equal(used.size, 1, `trial ${session.options.trialId} used ${[...used].join(', ')}`);
    }

    // A replica nobody listens on: the trial's call goes to the live one, and its log says so.
    const dead = 'http://127.0.0.1:9/v1';
    const notes: string[] = [];
    const { session } = await open('moved', { replicas: [dead, r2.openAiBaseUrl], note: (l) => notes.push(l) });
    await chat(session, { messages: [{ role: 'user', content: 'go' }] });
    const [call] = await records(session, 1);
    assert.equal(call!.status, 200);
    assert.equal(call!.replica, r2.openAiBaseUrl);
    assert.match(notes.join('\n'), /replica http:\/\/127\.0\.0\.1:9\/v1 did not answer .* go to http/);
  });

  it('policy version: each call stamped with the value when it ran', async () => {
    let version = 3;
    const { session } = await open('policy', {
      shaping: { tokens: true },
      policyVersion: () => Promise.resolve(version),
    });
    await chat(session, { messages: [{ role: 'user', content: 'go' }] });
    version = 4;
    await chat(session, { messages: [{ role: 'user', content: 'go' }] });
    assert.deepEqual(
      (await records(session, 2)).map((r) => r.policy_version),
      [3, 4]
    );
  });

  describe('an upstream that returns no token ids', () => {
    // A stand-in for an OpenAI-compatible server without token ids (a hosted API, an old vLLM): plain Chat replies.
    let plain: http.Server;
    let plainUrl: string;
    before(async () => {
      plain = http.createServer((req, res) => {
        req.resume();
        res.setHeader('content-type', 'application/json');
        if (req.method === 'GET') return res.end(JSON.stringify({ object: 'list', data: [{ id: 'plain-model' }] }));
        const message = { role: 'assistant', content: 'ok' };
        const usage = { prompt_tokens: 5, completion_tokens: 1, total_tokens: 6 };
        res.end(JSON.stringify({ id: 'c', object: 'chat.completion', choices: [{ index: 0, message }], usage }));
      });
      await new Promise<void>((resolve) => plain.listen(0, '127.0.0.1', resolve));
      plainUrl = `http://127.0.0.1:${(plain.address() as AddressInfo).port}/v1`;
    });
    after(() => new Promise<void>((resolve) => plain.close(() => resolve())));

    const check = (baseUrl: string, dialect = 'openai-chat') => ({
      agent: 'mini-swe-agent',
      vendor: 'openai' as const,
      upstream: { baseUrl, apiKey: 'sk-real' },
      tokens: { dialect, model: null },
    });

    it('preflight: one line naming the server and what it did not return (exit 3: PreflightError); vLLM passes', async () => {
      const vllm = scripted.session('preflight-vllm', SCENARIO).openAiBaseUrl;
      await probeUpstreams([check(vllm), check(vllm, 'openai-responses')]);
      await assert.rejects(probeUpstreams([check(vllm), check(plainUrl)]), (err: Error) => {
        assert.ok(err instanceof PreflightError);
        assert.equal(err.message.split('\n').length, 1);
        assert.match(
          err.message,
          new RegExp(
            `^preflight: ${plainUrl} \\(agent mini-swe-agent, tokens: true\\) returns no token ids: POST /chat/completions with return_token_ids, logprobs returned no prompt ids and no completion ids; no trial was started`
          )
        );
        return true;
      });
      await assert.rejects(
        probeUpstreams([{ ...check(vllm, 'anthropic'), vendor: 'anthropic' }]),
        /no supported server returns token ids on anthropic calls/
      );
    });

    it('mid-job: a call that came back without ids is recorded as such, and the export splits there, never glues', async () => {
      const vllm = scripted.session('mid-job', SCENARIO);
      const session = await gateway.openTrial({
        trialId: 'job/mid-job',
        agentDir: path.join(agentDir, 'mid-job'),
        upstreams: upstreamsFromEnv({ OPENAI_API_KEY: 'sk-real', OPENAI_BASE_URL: vllm.openAiBaseUrl }),
        shaping: { tokens: true },
        // The second call's replica list sends it to the plain server: a server swapped mid-job.
      });
      opened.push(session);
      const messages = await agentLoop(session, false, 2);
      // The same conversation, answered by a server without ids (as if a replica were swapped mid-job).
      const swapped = await gateway.openTrial({
        trialId: 'job/mid-job-plain',
        agentDir: path.join(agentDir, 'mid-job'),
        upstreams: upstreamsFromEnv({ OPENAI_API_KEY: 'sk-real', OPENAI_BASE_URL: plainUrl }),
        shaping: { tokens: true },
      });
      opened.push(swapped);
      await chat(swapped, { messages });
      const calls = await records(session, 3);
      assert.equal(calls.length, 3);
      assert.equal(calls[2]!.tokens_missing, true);
      assert.equal(calls[2]!.prompt_token_ids, undefined);
      assert.ok(calls.slice(0, 2).every((c) => c.tokens_missing === undefined));
      const view = tokenView(calls);
      assert.equal(view.calls_without_tokens, 1);
      assert.equal(view.segments.length, 1);
      assert.deepEqual(
        view.segments[0]!.calls.map((c) => c.seq),
        [calls[0]!.seq, calls[1]!.seq]
      );
    });
  });
});
