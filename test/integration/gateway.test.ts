/**
 * The model gateway against the scripted model server (the stand-in for vendor APIs): the four dialects JSON and
 * SSE, per-trial tokens, the real key only upstream, records with normalised usage, SSE passed through unbuffered,
 * failures typed, and a real container reaching the gateway on the Docker bridge. Retries at the gateway:
 * gateway.faults.test.ts.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { networkInterfaces, tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import Docker from 'dockerode';

import { DockerEnvironment } from '../../src/environments/docker';
import { LABEL_JOB } from '../../src/contracts/environment';
import type { TrialSession } from '../../src/gateway/gateway';
import { ModelGateway } from '../../src/gateway/gateway';
import type { LlmCallRecord } from '../../src/gateway/records';
import { readCallRecords } from '../../src/gateway/records';
import type { GatewayAccess } from '../../src/contracts/agent';
import { gatewayEnv, upstreamsFromEnv } from '../../src/gateway/upstreams';
import { removeJobLeftovers } from '../support/docker';
import type { Scenario, ScriptedModelServer } from '../support/scripted-model-server';
import { SIDE_CALL_USAGE, scriptedUsage, startScriptedModelServer } from '../support/scripted-model-server';
import { TEST_HOST_ID } from '../support/temporal';

// The assertions read vendor wire JSON by path.
/* eslint-disable @typescript-eslint/no-unsafe-member-access */
type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

const REAL_KEYS = {
  OPENAI_API_KEY: `sk-openai-${randomBytes(8).toString('hex')}`,
  ANTHROPIC_API_KEY: `sk-ant-${randomBytes(8).toString('hex')}`,
  GEMINI_API_KEY: `gm-${randomBytes(8).toString('hex')}`,
};
const SCENARIO: Scenario = { turns: [{ shell: 'echo hi > hi.txt' }, { say: 'done' }] };
const BASH_TOOL = {
  type: 'object',
  properties: { command: { type: 'string' } },
  required: ['command'],
};

async function records(session: TrialSession): Promise<LlmCallRecord[]> {
  const out: LlmCallRecord[] = [];
  for await (const record of readCallRecords(session.callsFile)) out.push(record);
  return out;
}

function post(url: string, body: unknown, headers: Record<string, string>): Promise<Response> {
  return fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
}

/** A POST whose body is streamed without a length (chunked): the status the gateway answered with. */
function chunkedPost(url: string, token: string, body: Buffer): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method: 'POST', headers: { authorization: `Bearer ${token}` } }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on('error', reject);
    for (let at = 0; at < body.length; at += 2 ** 20) req.write(body.subarray(at, at + 2 ** 20));
    req.end();
  });
}

describe('model gateway', () => {
  let gateway: ModelGateway;
  let scripted: ScriptedModelServer;
  let agentDir: string;
  const opened: TrialSession[] = [];

  before(async () => {
    gateway = new ModelGateway({ maxWaitMs: 2_000 });
    scripted = await startScriptedModelServer();
    agentDir = await mkdtemp(path.join(tmpdir(), 'rollout-gateway-'));
  });
  after(async () => {
    for (const session of opened) await session.close();
    await gateway.close();
    await scripted.close();
  });

  /** A trial session whose upstreams are scripted sessions, as the agent's env would name them. */
  async function open(name: string, scenario: Scenario = SCENARIO) {
    const upstream = scripted.session(name, scenario);
    const env = {
      ...REAL_KEYS,
      OPENAI_BASE_URL: upstream.openAiBaseUrl,
      ANTHROPIC_BASE_URL: upstream.baseUrl,
      GOOGLE_GEMINI_BASE_URL: upstream.baseUrl,
    };
    const session = await gateway.openTrial({
      trialId: `job/${name}`,
      agentDir: path.join(agentDir, name),
      upstreams: upstreamsFromEnv(env),
    });
    opened.push(session);
    const access = await session.access();
    return { session, access, upstream, containerEnv: gatewayEnv(env, access) };
  }

  it('OpenAI Chat (JSON) and Responses (SSE): token swapped for the real key, usage recorded, no key on disk', async () => {
    const { session, access, upstream, containerEnv } = await open('openai');
    for (const value of Object.values(REAL_KEYS)) assert.ok(!Object.values(containerEnv).includes(value));
    assert.equal(containerEnv.OPENAI_API_KEY, access.token);
    assert.equal(containerEnv.OPENAI_BASE_URL, access.baseUrls.openai);

    const auth = { authorization: `Bearer ${access.token}` };
    const chat = (await (
      await post(
        `${access.baseUrls.openai}/chat/completions`,
        {
          model: 'gpt-5',
          messages: [{ role: 'user', content: 'go' }],
          tools: [{ type: 'function', function: { name: 'bash', parameters: BASH_TOOL } }],
        },
        auth
      )
    ).json()) as Json;
    assert.equal(chat.choices[0].message.tool_calls[0].function.name, 'bash');

    const res = await post(
      `${access.baseUrls.openai}/responses`,
      {
        model: 'gpt-5',
        stream: true,
        input: [
          { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'go' }] },
          { type: 'function_call', call_id: 'c1', name: 'bash', arguments: '{"command":"x"}' },
          { type: 'function_call_output', call_id: 'c1', output: 'ok' },
        ],
        tools: [{ type: 'function', name: 'bash', parameters: BASH_TOOL }],
      },
      auth
    );
    assert.match(res.headers.get('content-type') ?? '', /event-stream/);
    assert.match(await res.text(), /response\.completed/);
    await session.close();

    assert.deepEqual(
      upstream.calls.map((c) => c.credential),
      [REAL_KEYS.OPENAI_API_KEY, REAL_KEYS.OPENAI_API_KEY]
    );
    const calls = await records(session);
    assert.deepEqual(
      calls.map((c) => [c.seq, c.dialect, c.kind, c.stream, c.status, c.model]),
      [
        [1, 'openai-chat', 'generate', false, 200, 'gpt-5'],
        [2, 'openai-responses', 'generate', true, 200, 'gpt-5'],
      ]
    );
    assert.deepEqual(calls[0]!.usage, scriptedUsage(0));
    assert.deepEqual(calls[1]!.usage, scriptedUsage(1));
    // The SSE response is recorded as the whole response it stands for.
    assert.equal((calls[1]!.response as Json).output[0].type, 'message');
    assert.deepEqual(session.usage(), {
      calls: 2,
      input_tokens: scriptedUsage(0).input_tokens + scriptedUsage(1).input_tokens,
      output_tokens: scriptedUsage(0).output_tokens + scriptedUsage(1).output_tokens,
      cached_tokens: scriptedUsage(0).cached_tokens + scriptedUsage(1).cached_tokens,
    });
    const file = await readFile(session.callsFile, 'utf8');
    for (const secret of [...Object.values(REAL_KEYS), access.token]) assert.ok(!file.includes(secret));
  });

  it('Anthropic (SSE + count_tokens) and Gemini (SSE via ?alt=sse, key in the query): each SDK’s auth scheme kept', async () => {
    const { session, access, upstream } = await open('anthropic-gemini');
    const messages = [{ role: 'user', content: 'go' }];
    const tools = [{ name: 'Bash', input_schema: BASH_TOOL }];
    const sse = await (
      await post(
        `${access.baseUrls.anthropic}/v1/messages?beta=true`,
        { model: 'claude-sonnet-4-5', messages, tools, stream: true, max_tokens: 10 },
        { 'x-api-key': access.token }
      )
    ).text();
    assert.match(sse, /event: message_stop/);
    const count = await post(
      `${access.baseUrls.anthropic}/v1/messages/count_tokens`,
      { model: 'claude-sonnet-4-5', messages },
      { 'x-api-key': access.token }
    );
    assert.deepEqual(await count.json(), { input_tokens: SIDE_CALL_USAGE.input_tokens });
    const gem = await (
      await post(
        `${access.baseUrls.gemini}/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse&key=${access.token}`,
        {
          contents: [{ role: 'user', parts: [{ text: 'go' }] }],
          tools: [{ functionDeclarations: [{ name: 'run_shell_command', parameters: BASH_TOOL }] }],
        },
        {}
      )
    ).text();
    assert.match(gem, /functionCall/);
    await session.close();

    assert.deepEqual(
      upstream.calls.map((c) => [c.credential, c.path.includes(access.token)]),
      [
        [REAL_KEYS.ANTHROPIC_API_KEY, false],
        [REAL_KEYS.ANTHROPIC_API_KEY, false],
        [REAL_KEYS.GEMINI_API_KEY, false],
      ]
    );
    const calls = await records(session);
    assert.deepEqual(
      calls.map((c) => [c.dialect, c.kind, c.model]),
      [
        ['anthropic', 'generate', 'claude-sonnet-4-5'],
        ['anthropic', 'count_tokens', 'claude-sonnet-4-5'],
        ['gemini', 'generate', 'gemini-2.5-pro'],
      ]
    );
    // Anthropic's split usage (input + cache reads, output in message_delta) comes back normalised.
    assert.deepEqual(calls[0]!.usage, scriptedUsage(0));
    assert.equal((calls[0]!.response as Json).content[0].type, 'tool_use');
    assert.deepEqual(calls[2]!.usage, scriptedUsage(0));
    assert.ok(!calls[2]!.path.includes('key='), 'the query string (which may hold a key) is not recorded');
    // The Gemini key the agent put in the query goes upstream as x-goog-api-key, never in the URL.
    assert.ok(!upstream.calls[2]!.path.includes('key='), upstream.calls[2]!.path);
    assert.equal(upstream.calls[2]!.headers['x-goog-api-key'], REAL_KEYS.GEMINI_API_KEY);
    assert.equal(session.usage().calls, 2, 'count_tokens is not a model call');
  });

  it('a hostile agent: only generate, count-tokens and model-list routes are forwarded, only allowed headers, bodies bounded', async () => {
    const { session, access, upstream } = await open('routes');
    const auth = { authorization: `Bearer ${access.token}` };
    const { openai, anthropic, gemini } = access.baseUrls;
    const refused: [string, string][] = [
      ['GET', `${openai}/files`],
      ['POST', `${openai}/files`],
      ['DELETE', `${openai}/files/file-abc`],
      ['POST', `${openai}/batches`],
      ['POST', `${openai}/fine_tuning/jobs`],
      ['GET', `${openai}/organization/projects`],
      ['GET', `${openai}/completions`],
      ['POST', `${openai}/completions/x`],
      ['POST', `${openai}/images/generations`],
      ['GET', `${openai}/responses`],
      ['DELETE', `${openai}/chat/completions`],
      ['POST', `${openai}/chat/completions/x`],
      ['GET', `${openai}/chat/completions?after=x`],
      ['POST', `${anthropic}/v1/messages/batches`],
      ['GET', `${anthropic}/v1/files`],
      ['POST', `${anthropic}/v1/organizations/api_keys`],
      ['GET', `${gemini}/v1beta/files`],
      ['POST', `${gemini}/v1beta/cachedContents`],
      ['POST', `${gemini}/v1beta/tunedModels`],
      ['POST', `${gemini}/v1beta/models/gemini-2.5-pro:embedContent`],
    ];
    for (const [method, url] of refused) {
      const res = await fetch(url, {
        method,
        headers: { ...auth, 'content-type': 'application/json' },
        ...(method === 'POST' ? { body: '{"model":"gpt-5"}' } : {}),
      });
      assert.equal(res.status, 403, `${method} ${url}`);
      assert.match(await res.text(), /not a model call this gateway forwards/);
    }
    assert.equal(upstream.calls.length, 0, 'no refused route reached upstream');

    const hostileHeaders = {
      ...auth,
      'OpenAI-Organization': 'org-other',
      'OpenAI-Project': 'proj-other',
      'x-goog-user-project': 'billing-other',
      'anthropic-beta': 'files-api-2025-04-14, interleaved-thinking-2025-05-14,mcp-client-2025-04-04',
      cookie: 'session=x',
      'x-forwarded-for': '10.0.0.1',
      'x-stainless-lang': 'js',
    };
    const chat = { model: 'gpt-5', messages: [{ role: 'user', content: 'go' }] };
    assert.equal((await post(`${openai}/chat/completions`, chat, hostileHeaders)).status, 200);
    assert.equal((await fetch(`${openai}/models`, { headers: auth })).status, 200);
    const sent = upstream.calls[0]!.headers;
    for (const name of ['openai-organization', 'openai-project', 'x-goog-user-project', 'cookie', 'x-forwarded-for'])
      assert.equal(sent[name], undefined, `${name} not passed upstream`);
    assert.equal(sent['anthropic-beta'], 'interleaved-thinking-2025-05-14', 'only model-behaviour betas pass');
    assert.equal(sent['x-stainless-lang'], 'js');
    assert.equal(sent.authorization, `Bearer ${REAL_KEYS.OPENAI_API_KEY}`);

    // Bodies: over 32 MiB refused (declared, or streamed without a length) before anything goes upstream.
    const big = Buffer.alloc(33 * 2 ** 20, 'a');
    assert.equal((await fetch(`${openai}/chat/completions`, { method: 'POST', headers: auth, body: big })).status, 413);
    assert.equal(await chunkedPost(`${openai}/chat/completions`, access.token, big), 413);
    assert.equal(upstream.calls.length, 2);
    // Records keep at most 8 MiB of a body: a 9 MiB request is forwarded, recorded as its size.
    const long = { model: 'gpt-5', messages: [{ role: 'user', content: 'x'.repeat(9 * 2 ** 20) }] };
    assert.equal((await post(`${openai}/chat/completions`, long, auth)).status, 200);
    await session.close();
    const calls = await records(session);
    assert.match(String(calls.at(-1)!.request), /^\[request of \d+ characters not recorded: over 8 MiB\]$/);
    assert.ok(calls.at(-1)!.usage, 'its usage still counted');
  });

  it('refuses a wrong token, another trial’s token, and any token once its trial’s step ended; nothing reaches upstream', async () => {
    const a = await open('tok-a');
    const b = await open('tok-b');
    const body = { model: 'm', messages: [{ role: 'user', content: 'go' }] };
    const url = `${a.access.baseUrls.openai}/chat/completions`;
    assert.equal((await post(url, body, { authorization: 'Bearer nope' })).status, 401);
    assert.equal((await post(url, body, { authorization: `Bearer ${b.access.token}` })).status, 401);
    assert.equal((await post(url, body, {})).status, 401);
    assert.equal((await post(url, body, { authorization: `Bearer ${a.access.token}` })).status, 200);
    await a.session.close();
    assert.equal((await post(url, body, { authorization: `Bearer ${a.access.token}` })).status, 401);
    assert.equal(a.upstream.calls.length, 1);
  });

  it('failures: a 429 past max_wait is typed and cleared by a later success; a stream cut reaches the agent as a broken stream', async () => {
    // retry-after 5 s is beyond this gateway's max_wait (2 s): the 429 is passed on at once.
    const { session, access } = await open('faults', {
      ...SCENARIO,
      fault: { kind: 'rate-limit', times: 1, retryAfterSec: 5 },
    });
    const url = `${access.baseUrls.openai}/chat/completions`;
    const auth = { authorization: `Bearer ${access.token}` };
    const body = { model: 'm', messages: [{ role: 'user', content: 'go' }] };
    const limited = await post(url, body, auth);
    assert.equal(limited.status, 429);
    assert.equal(limited.headers.get('retry-after'), '5');
    assert.equal(session.failure()?.type, 'ApiRateLimitError');
    assert.equal((await post(url, body, auth)).status, 200);
    assert.equal(session.failure(), null);

    const cut = await open('cut', { ...SCENARIO, fault: { kind: 'stream-cut' } });
    const res = await post(
      `${cut.access.baseUrls.anthropic}/v1/messages`,
      { model: 'c', messages: body.messages, stream: true, max_tokens: 5 },
      { 'x-api-key': cut.access.token }
    );
    await assert.rejects(res.text());
    await cut.session.close();
    const [record] = await records(cut.session);
    assert.equal(record!.error?.type, 'ApiOverloadedError');
    assert.equal(cut.session.failure()?.type, 'ApiOverloadedError');

    // Overloaded past max_wait (2 s): retried with backoff, then the 529 is passed on.
    const overloaded = await open('overloaded', { ...SCENARIO, fault: { kind: 'overloaded' } });
    await post(
      `${overloaded.access.baseUrls.anthropic}/v1/messages`,
      { model: 'c', messages: body.messages },
      {
        'x-api-key': overloaded.access.token,
      }
    );
    assert.equal(overloaded.session.failure()?.type, 'ApiOverloadedError');
    const context = await open('context', { ...SCENARIO, fault: { kind: 'context-window' } });
    await post(`${context.access.baseUrls.openai}/chat/completions`, body, {
      authorization: `Bearer ${context.access.token}`,
    });
    assert.equal(context.session.failure()?.type, 'ContextWindowExceededError');
    const auth401 = await open('auth', { ...SCENARIO, fault: { kind: 'auth' } });
    await post(`${auth401.access.baseUrls.openai}/chat/completions`, body, {
      authorization: `Bearer ${auth401.access.token}`,
    });
    assert.equal(auth401.session.failure()?.type, 'AgentAuthenticationError');
  });

  it('passes SSE through unbuffered: the agent sees the first event while upstream still holds the rest', async () => {
    // An upstream that sends one event, then waits until the test has seen it through the gateway.
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    const upstream = http.createServer((req, res) => {
      req.resume();
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write('data: {"choices":[{"index":0,"delta":{"content":"a"}}]}\n\n');
      void released.then(() => {
        res.write(
          'data: {"choices":[{"index":0,"delta":{"content":"b"}}],"usage":{"prompt_tokens":3,"completion_tokens":2}}\n\n'
        );
        res.end('data: [DONE]\n\n');
      });
    });
    await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
    try {
      const port = (upstream.address() as AddressInfo).port;
      const session = await gateway.openTrial({
        trialId: 'job/unbuffered',
        agentDir: path.join(agentDir, 'unbuffered'),
        upstreams: upstreamsFromEnv({ OPENAI_BASE_URL: `http://127.0.0.1:${port}/v1`, OPENAI_API_KEY: 'k' }),
      });
      opened.push(session);
      const access = await session.access();
      const res = await post(
        `${access.baseUrls.openai}/chat/completions`,
        { model: 'm', stream: true, messages: [] },
        { authorization: `Bearer ${access.token}` }
      );
      const reader = res.body!.getReader();
      const first = await reader.read();
      assert.match(Buffer.from(first.value ?? []).toString(), /"content":"a"/);
      release();
      let rest = '';
      for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read())
        rest += Buffer.from(chunk.value).toString();
      assert.match(rest, /\[DONE\]/);
      await session.close();
      const [record] = await records(session);
      assert.equal((record!.response as Json).choices[0].message.content, 'ab');
      assert.deepEqual(record!.usage, { input_tokens: 3, output_tokens: 2, cached_tokens: 0 });
    } finally {
      upstream.close();
    }
  });

  it('a real container reaches the gateway on the Docker bridge address, and the gateway listens nowhere else', async () => {
    const docker = new Docker();
    const jobName = `gateway-test-${randomBytes(3).toString('hex')}`;
    const environment = new DockerEnvironment({ hostId: `gw-${TEST_HOST_ID}`, deployment: 'gateway-test' });
    const host = await environment.gatewayHost();
    assert.match(host, /^\d+\.\d+\.\d+\.\d+$/);
    assert.notEqual(host, '0.0.0.0');
    const { session, upstream } = await open('container');
    const access: GatewayAccess = await session.access(host);
    const { hostname, port, pathname } = new URL(access.baseUrls.openai);
    assert.equal(hostname, host);
    const body = JSON.stringify({ model: 'gpt-5', messages: [{ role: 'user', content: 'go' }] });
    const request =
      `POST ${pathname}/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer ${access.token}\r\n` +
      `Content-Type: application/json\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`;
    // bookworm-slim has no curl: bash's /dev/tcp speaks the HTTP.
    const script = `exec 3<>/dev/tcp/${hostname}/${port} && printf '%s' "$REQUEST" >&3 && cat <&3`;
    try {
      const container = await docker.createContainer({
        Image: 'debian:bookworm-slim',
        Cmd: ['bash', '-c', script],
        Env: [`REQUEST=${request}`],
        Labels: { [LABEL_JOB]: jobName },
      });
      await container.start();
      await container.wait();
      const logs = (await container.logs({ stdout: true, stderr: true })).toString('utf8');
      assert.match(logs, /HTTP\/1.1 200/);
      assert.match(logs, /chat\.completion/);
      assert.equal(upstream.calls[0]?.credential, REAL_KEYS.OPENAI_API_KEY);
      // The host's other addresses (those other machines could reach) refuse the gateway's port.
      const others = Object.values(networkInterfaces())
        .flat()
        .filter((a) => a && a.family === 'IPv4' && !a.internal && a.address !== host);
      for (const other of others) {
        const refused = await fetch(`http://${other!.address}:${port}/`).then(
          () => false,
          () => true
        );
        assert.ok(refused, `the gateway answers on ${other!.address}`);
      }
    } finally {
      await removeJobLeftovers(jobName);
    }
  });
});
