/** The scripted model server (the stand-in for vendor APIs): each dialect, JSON and SSE, turn indexing, side calls, faults. */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { after, before, describe, it } from 'node:test';

import type { ScriptedModelServer, Scenario } from '../support/scripted-model-server';
import { SIDE_CALL_USAGE, scriptedUsage, startScriptedModelServer } from '../support/scripted-model-server';

// The assertions read vendor wire JSON by path; typing every shape would only restate the dialects.
/* eslint-disable @typescript-eslint/no-unsafe-member-access, @typescript-eslint/no-unsafe-assignment, @typescript-eslint/no-unsafe-argument, @typescript-eslint/no-unsafe-return, @typescript-eslint/no-unsafe-call */
type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

const SCENARIO: Scenario = {
  turns: [{ shell: "printf 'Hello' > hello.txt" }, { write: { path: 'b.txt', content: 'B' } }, { say: 'all done' }],
};

async function post(url: string, body: unknown, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
}

/** Parsed `data:` payloads of an SSE body (the `[DONE]` sentinel kept as a string). */
async function sseData(res: Response): Promise<unknown[]> {
  assert.match(res.headers.get('content-type') ?? '', /text\/event-stream/);
  const text = await res.text();
  return text
    .split('\n\n')
    .filter((frame) => frame.trim())
    .map((frame) => {
      const data = frame
        .split('\n')
        .find((line) => line.startsWith('data: '))!
        .slice(6);
      return data === '[DONE]' ? data : (JSON.parse(data) as unknown);
    });
}

const chatTools = [
  {
    type: 'function',
    function: {
      name: 'run_shell_command',
      parameters: {
        type: 'object',
        properties: { command: { type: 'string' }, description: { type: 'string' } },
        required: ['command', 'description'],
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'write_file',
      parameters: {
        type: 'object',
        properties: { file_path: { type: 'string' }, content: { type: 'string' } },
        required: ['file_path', 'content'],
      },
    },
  },
];

describe('scripted model server', () => {
  let server: ScriptedModelServer;
  before(async () => {
    server = await startScriptedModelServer();
  });
  after(() => server.close());

  it('OpenAI Chat: renders turns with the request’s own tool and parameter names, index from the conversation', async () => {
    const session = server.session('chat', SCENARIO);
    const first = (await (
      await post(`${session.openAiBaseUrl}/chat/completions`, {
        model: 'm1',
        messages: [{ role: 'user', content: 'go' }],
        tools: chatTools,
      })
    ).json()) as Json;
    const call = first.choices[0].message.tool_calls[0];
    assert.equal(call.function.name, 'run_shell_command');
    assert.deepEqual(JSON.parse(call.function.arguments), {
      command: "printf 'Hello' > hello.txt",
      description: 'ok',
    });
    assert.equal(first.choices[0].finish_reason, 'tool_calls');
    assert.deepEqual(first.usage, {
      prompt_tokens: 1000,
      completion_tokens: 20,
      total_tokens: 1020,
      prompt_tokens_details: { cached_tokens: 0 },
    });

    // Second turn, streamed: the write tool with its own parameter names, arguments split across deltas.
    const history = [
      { role: 'user', content: 'go' },
      { role: 'assistant', content: null, tool_calls: [call] },
      { role: 'tool', tool_call_id: call.id, content: '' },
    ];
    const events = (await sseData(
      await post(`${session.openAiBaseUrl}/chat/completions`, {
        model: 'm1',
        messages: history,
        tools: chatTools,
        stream: true,
        stream_options: { include_usage: true },
      })
    )) as Json[];
    assert.equal(events.at(-1), '[DONE]');
    const args = events
      .slice(0, -1)
      .flatMap((e) => e.choices.flatMap((c: Json) => c.delta.tool_calls ?? []))
      .map((t: Json) => t.function.arguments ?? '')
      .join('');
    assert.deepEqual(JSON.parse(args), { file_path: 'b.txt', content: 'B' });
    assert.equal(events[0]!.choices[0].delta.tool_calls[0].function.name, 'write_file');
    assert.deepEqual(events.at(-2)!.usage.prompt_tokens_details, { cached_tokens: 50 });

    // Third turn: the final text; a retry of it gets the same answer (no server-side counter).
    const third = [...history, { role: 'assistant', content: 'x' }, { role: 'user', content: 'next' }];
    for (let i = 0; i < 2; i++) {
      const done = (await (
        await post(`${session.openAiBaseUrl}/chat/completions`, { model: 'm1', messages: third, tools: chatTools })
      ).json()) as Json;
      assert.equal(done.choices[0].message.content, 'all done');
      assert.equal(done.choices[0].finish_reason, 'stop');
    }
    assert.deepEqual(
      session.calls.map((c) => c.turnIndex),
      [0, 1, 2, 2]
    );
    const expected = [0, 1, 2, 2].map(scriptedUsage);
    assert.deepEqual(session.usage(), {
      input_tokens: expected.reduce((s, u) => s + u.input_tokens, 0),
      output_tokens: expected.reduce((s, u) => s + u.output_tokens, 0),
      cached_tokens: expected.reduce((s, u) => s + u.cached_tokens, 0),
    });
  });

  it('Anthropic Messages: SSE with tool_use built from input_json_delta, usage split into cache reads, count_tokens', async () => {
    const session = server.session('anthropic', SCENARIO);
    const tools = [
      {
        name: 'Bash',
        input_schema: {
          type: 'object',
          properties: { command: { type: 'string' }, timeout: { type: 'number' } },
          required: ['command'],
        },
      },
      {
        name: 'Write',
        input_schema: {
          type: 'object',
          properties: { file_path: { type: 'string' }, content: { type: 'string' } },
          required: ['file_path', 'content'],
        },
      },
    ];
    const messages = [
      { role: 'user', content: [{ type: 'text', text: 'go' }] },
      { role: 'assistant', content: [{ type: 'tool_use', id: 't1', name: 'Bash', input: { command: 'x' } }] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't1', content: '' }] },
    ];
    const res = await post(
      `${session.baseUrl}/v1/messages?beta=true`,
      { model: 'claude-x', messages, tools, stream: true, max_tokens: 100 },
      { 'x-api-key': 'sk-secret' }
    );
    const events = (await sseData(res)) as Json[];
    assert.deepEqual(
      events.map((e) => e.type),
      [
        'message_start',
        'content_block_start',
        'ping',
        'content_block_delta',
        'content_block_delta',
        'content_block_stop',
        'message_delta',
        'message_stop',
      ]
    );
    assert.equal(events[1]!.content_block.name, 'Write');
    const input = events
      .filter((e) => e.type === 'content_block_delta')
      .map((e) => e.delta.partial_json)
      .join('');
    assert.deepEqual(JSON.parse(input), { file_path: 'b.txt', content: 'B' });
    assert.deepEqual(events[0]!.message.usage, {
      input_tokens: 1050,
      output_tokens: 1,
      cache_read_input_tokens: 50,
      cache_creation_input_tokens: 0,
    });
    assert.equal(events[6]!.delta.stop_reason, 'tool_use');
    assert.equal(events[6]!.usage.output_tokens, 21);

    const count = (await (
      await post(`${session.baseUrl}/v1/messages/count_tokens`, { model: 'claude-x', messages })
    ).json()) as Json;
    assert.deepEqual(count, { input_tokens: SIDE_CALL_USAGE.input_tokens });
    assert.equal(session.calls[0]!.credential, 'sk-secret');
    assert.equal(session.calls[0]!.dialect, 'anthropic');
  });

  it('OpenAI Responses: function_call with an array command, custom apply_patch, typed events, WebSocket refused', async () => {
    const session = server.session('responses', SCENARIO);
    const tools = [
      {
        type: 'function',
        name: 'shell',
        parameters: {
          type: 'object',
          properties: { command: { type: 'array', items: { type: 'string' } }, workdir: { type: 'string' } },
          required: ['command'],
        },
      },
      { type: 'custom', name: 'apply_patch', format: { type: 'grammar' } },
    ];
    const events = (await sseData(
      await post(`${session.openAiBaseUrl}/responses`, {
        model: 'gpt-x',
        input: [{ type: 'message', role: 'user', content: [{ type: 'input_text', text: 'go' }] }],
        tools,
        stream: true,
      })
    )) as Json[];
    assert.ok(events.every((e) => typeof e.type === 'string'));
    const done = events.find((e) => e.type === 'response.output_item.done')!;
    assert.equal(done.item.type, 'function_call');
    assert.deepEqual(JSON.parse(done.item.arguments), { command: ['bash', '-lc', "printf 'Hello' > hello.txt"] });
    const completed = events.at(-1)!;
    assert.equal(completed.type, 'response.completed');
    assert.equal(completed.response.usage.input_tokens, 1000);

    const second = (await (
      await post(`${session.openAiBaseUrl}/responses`, {
        model: 'gpt-x',
        input: [
          { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'go' }] },
          { type: 'reasoning', summary: [] },
          done.item,
          { type: 'function_call_output', call_id: done.item.call_id, output: '' },
        ],
        tools,
      })
    ).json()) as Json;
    assert.equal(second.output[0].type, 'custom_tool_call');
    assert.equal(second.output[0].input, '*** Begin Patch\n*** Add File: b.txt\n+B\n*** End Patch\n');

    const ws = await fetch(`${session.openAiBaseUrl}/responses`, {
      headers: { connection: 'upgrade', upgrade: 'websocket' },
    }).catch((err: unknown) => (err instanceof Error ? err : new Error(String(err))));
    assert.ok(ws instanceof Error || ws.status === 404, 'a WebSocket upgrade is refused');
  });

  it('Gemini: streamGenerateContent SSE and JSON array, JSON side calls filled from the schema, countTokens', async () => {
    const session = server.session('gemini', SCENARIO);
    const tools = [
      {
        functionDeclarations: [
          {
            name: 'run_shell_command',
            parametersJsonSchema: {
              type: 'object',
              properties: { command: { type: 'string' }, directory: { type: 'string' } },
              required: ['command'],
            },
          },
        ],
      },
    ];
    const contents = [{ role: 'user', parts: [{ text: 'go' }] }];
    const events = (await sseData(
      await post(
        `${session.baseUrl}/v1beta/models/gemini-x:streamGenerateContent?alt=sse`,
        { contents, tools },
        {
          'x-goog-api-key': 'g-key',
        }
      )
    )) as Json[];
    const part = events[0]!.candidates[0].content.parts[0];
    assert.deepEqual(part.functionCall, { name: 'run_shell_command', args: { command: "printf 'Hello' > hello.txt" } });
    assert.equal(events.at(-1)!.usageMetadata.promptTokenCount, 1000);

    // No write tool: the write turn becomes a shell command that writes the file.
    const next = [...contents, { role: 'model', parts: [part] }, { role: 'user', parts: [{ functionResponse: {} }] }];
    const array = (await (
      await post(`${session.baseUrl}/v1beta/models/gemini-x:streamGenerateContent`, { contents: next, tools })
    ).json()) as Json[];
    assert.ok(Array.isArray(array));
    assert.match(array[0]!.candidates[0].content.parts[0].functionCall.args.command, /printf '%s' 'B' > 'b.txt'/);

    // A next-speaker style check mid-conversation is a side call: it does not move the turn index.
    const side = (await (
      await post(`${session.baseUrl}/v1beta/models/gemini-x:generateContent`, {
        contents: next,
        generationConfig: {
          responseMimeType: 'application/json',
          responseJsonSchema: {
            type: 'object',
            properties: { reasoning: { type: 'string' }, next_speaker: { type: 'string', enum: ['user', 'model'] } },
            required: ['reasoning', 'next_speaker'],
          },
        },
      })
    ).json()) as Json;
    assert.deepEqual(JSON.parse(side.candidates[0].content.parts[0].text), { reasoning: 'ok', next_speaker: 'user' });
    const count = (await (
      await post(`${session.baseUrl}/v1beta/models/gemini-x:countTokens`, { contents })
    ).json()) as Json;
    assert.deepEqual(count, { totalTokens: SIDE_CALL_USAGE.input_tokens });
    assert.deepEqual(
      session.calls.map((c) => [c.turnIndex, c.side]),
      [
        [0, false],
        [1, false],
        [null, true],
        [null, false],
      ]
    );
    assert.equal(session.calls[0]!.credential, 'g-key');
  });

  it('text turns for agents without tools, literal calls, and a tool-less request during a tool turn is a side call', async () => {
    const session = server.session('text', {
      turns: [
        { text: 'hello.txt\n```\nHello\n```' },
        { call: { name: 'attempt_completion', arguments: { result: 'x' } } },
      ],
    });
    const url = `${session.openAiBaseUrl}/chat/completions`;
    const first = (await (await post(url, { model: 'm', messages: [{ role: 'user', content: 'go' }] })).json()) as Json;
    assert.equal(first.choices[0].message.content, 'hello.txt\n```\nHello\n```');
    const history = [
      { role: 'user', content: 'go' },
      { role: 'assistant', content: 'x' },
      { role: 'user', content: 'more' },
    ];
    const titleCall = (await (await post(url, { model: 'm', messages: history })).json()) as Json;
    assert.equal(titleCall.choices[0].message.content, 'ok');
    const tools = [
      { type: 'function', function: { name: 'attempt_completion', parameters: { properties: { result: {} } } } },
    ];
    const completion = (await (await post(url, { model: 'm', messages: history, tools })).json()) as Json;
    assert.equal(completion.choices[0].message.tool_calls[0].function.name, 'attempt_completion');
    assert.deepEqual(
      session.calls.map((c) => c.side),
      [false, true, false]
    );
  });

  it('faults: 429 with retry-after then recovery, 529, 401, context window, a stream cut mid-way', async () => {
    const body = { model: 'm', messages: [{ role: 'user', content: 'go' }], tools: chatTools };
    const limited = server.session('limited', {
      ...SCENARIO,
      fault: { kind: 'rate-limit', times: 2, retryAfterSec: 3 },
    });
    for (let i = 0; i < 2; i++) {
      const res = await post(`${limited.openAiBaseUrl}/chat/completions`, body);
      assert.equal(res.status, 429);
      assert.equal(res.headers.get('retry-after'), '3');
      assert.equal(((await res.json()) as Json).error.code, 'rate_limit_exceeded');
    }
    assert.equal((await post(`${limited.openAiBaseUrl}/chat/completions`, body)).status, 200);

    const anthropicBody = { model: 'c', messages: [{ role: 'user', content: 'go' }], max_tokens: 10 };
    const overloaded = server.session('overloaded', { ...SCENARIO, fault: { kind: 'overloaded' } });
    const res529 = await post(`${overloaded.baseUrl}/v1/messages`, anthropicBody);
    assert.equal(res529.status, 529);
    assert.equal(((await res529.json()) as Json).error.type, 'overloaded_error');

    const auth = server.session('auth', { ...SCENARIO, fault: { kind: 'auth' } });
    assert.equal((await post(`${auth.baseUrl}/v1/messages`, anthropicBody)).status, 401);
    const context = server.session('context', { ...SCENARIO, fault: { kind: 'context-window' } });
    const res400 = await post(`${context.openAiBaseUrl}/chat/completions`, body);
    assert.equal(res400.status, 400);
    assert.equal(((await res400.json()) as Json).error.code, 'context_length_exceeded');

    const cut = server.session('cut', { ...SCENARIO, fault: { kind: 'stream-cut' } });
    const streamed = await post(`${cut.baseUrl}/v1/messages`, { ...anthropicBody, stream: true });
    assert.equal(streamed.status, 200);
    await assert.rejects(streamed.text(), 'the stream ends in an error, not a clean end');
    assert.equal(cut.calls[0]!.fault, 'stream-cut');
  });

  it('as a process: scenarios registered and calls read over HTTP', async () => {
    const child = spawn(process.execPath, [path.join(__dirname, '..', 'support', 'scripted-model-server.js')], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    try {
      const [line] = (await once(createInterface({ input: child.stdout }), 'line')) as [string];
      const { url } = JSON.parse(line) as { url: string };
      const put = await fetch(`${url}/_sessions/p1`, {
        method: 'PUT',
        body: JSON.stringify({ turns: [{ say: 'hi' }] }),
      });
      assert.equal(put.status, 200);
      const bad = await fetch(`${url}/_sessions/p2`, { method: 'PUT', body: JSON.stringify({ turns: [{ nope: 1 }] }) });
      assert.equal(bad.status, 400);
      const answer = (await (
        await post(`${url}/s/p1/v1/chat/completions`, { model: 'm', messages: [{ role: 'user', content: 'go' }] })
      ).json()) as Json;
      assert.equal(answer.choices[0].message.content, 'hi');
      const { calls } = (await (await fetch(`${url}/_sessions/p1`)).json()) as Json;
      assert.equal(calls.length, 1);
      assert.deepEqual(calls[0].usage, scriptedUsage(0));
    } finally {
      child.kill();
    }
  });
});
