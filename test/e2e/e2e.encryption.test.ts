/**
 * Payload encryption (ROLLOUT_PAYLOAD_KEY) end to end, for real: the examples' hello-world task with the oracle, the
 * custom agent and the built-in terminus (its model calls through the worker's gateway to the scripted model server,
 * the stand-in for vendor APIs), run by the CLI and its worker on the tests' Temporal server and Docker. Every payload
 * of the Job's and the Trials' histories is encrypted: no plaintext of the task's instruction, the job's config, the
 * results, or the model calls (the prompts terminus sent, the replies it got, the command output it sent back) in any
 * string or byte of a history; `rollout codec-server` decodes them with the key, and a wrong key cannot.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import { historyToJSON } from '@temporalio/common/lib/proto-utils';
import type { temporal } from '@temporalio/proto';
import { parse, stringify } from 'yaml';

import type { LlmCallRecord } from '../../src/gateway/records';
import type { TrialResult } from '../../src/results/trial-result';
import type { CliRun } from '../support/cli';
import { runCli, startCli, workspace } from '../support/cli';
import { removeJobLeftovers } from '../support/docker';
import type { ScriptedModelServer } from '../support/scripted-model-server';
import { startScriptedModelServer } from '../support/scripted-model-server';
import { testTemporal } from '../support/temporal';

const jobName = `encrypted-${randomBytes(3).toString('hex')}`;
const KEY = randomBytes(32).toString('base64');
const MODEL_KEY = `sk-real-${randomBytes(12).toString('hex')}`;
/** Words only the scripted model's reply holds, and only the output of the command it asks for. */
const REPLY_MARKER = `reply-${randomBytes(6).toString('hex')}`;
const OUTPUT_MARKER = `output-${randomBytes(6).toString('hex')}`;
const TERMINUS_TURNS = [
  {
    text: JSON.stringify({
      analysis: `${REPLY_MARKER} the task wants a greeting file`,
      plan: 'write it',
      // The output differs from the command (the shell joins the halves): it is only in the next prompt.
      commands: [
        {
          keystrokes: `printf 'Hello, world!' > /app/hello.txt && echo ${OUTPUT_MARKER.slice(0, 9)}''${OUTPUT_MARKER.slice(9)}`,
        },
      ],
      task_complete: false,
    }),
  },
  { text: JSON.stringify({ analysis: REPLY_MARKER, plan: '', commands: [], task_complete: true }) },
  { text: JSON.stringify({ analysis: REPLY_MARKER, plan: '', commands: [], task_complete: true }) },
];
const CODEC_PORT = Number(process.env.ROLLOUT_TEST_TEMPORAL_PORT ?? 17233) + 300;
let dir: string;
let run: CliRun;
let instruction: string;
let scripted: ScriptedModelServer;
const histories = new Map<string, temporal.api.history.v1.IHistory>();

interface FoundPayload {
  where: string;
  encoding: string;
  data: Uint8Array;
  metadata: Record<string, Uint8Array>;
}

/**
 * Every payload of a history, but search attributes (the server indexes them; Rollout keeps them plain) and the
 * bookkeeping Temporal's core writes in markers: patch ids of `patched()`, a local activity's type, attempt and times
 * (its result is encrypted, and checked).
 */
function payloadsOf(value: unknown, where = ''): FoundPayload[] {
  if (!value || typeof value !== 'object' || ArrayBuffer.isView(value)) return [];
  if (/searchAttributes$|markerRecordedEventAttributes\.details\.(patch-data|data)$/i.test(where)) return [];
  const record = value as Record<string, unknown>;
  const metadata = record.metadata as Record<string, Uint8Array> | undefined;
  if (metadata && typeof metadata === 'object' && metadata.encoding instanceof Uint8Array) {
    return [
      {
        where,
        encoding: Buffer.from(metadata.encoding).toString(),
        data: (record.data as Uint8Array | undefined) ?? new Uint8Array(),
        metadata,
      },
    ];
  }
  return Object.entries(record).flatMap(([key, child]) => payloadsOf(child, where ? `${where}.${key}` : key));
}

/** Every string and every byte field (as UTF-8) of a history: where a plaintext could hide. */
function textsOf(value: unknown): string[] {
  if (typeof value === 'string') return [value];
  if (value instanceof Uint8Array) return [Buffer.from(value).toString('utf8')];
  if (!value || typeof value !== 'object') return [];
  return Object.values(value as Record<string, unknown>).flatMap(textsOf);
}

/** The first of `secrets` found in `texts`, as written or JSON-escaped (as a json/plain payload would hold it). */
function plaintextIn(texts: string[], secrets: string[]): string | undefined {
  return secrets.find((secret) =>
    [secret, JSON.stringify(secret).slice(1, -1)].some((form) => texts.some((text) => text.includes(form)))
  );
}

/** The message texts of the model calls the scripted server received and the replies it sent (its turns). */
function modelCallTexts(): string[] {
  const prompts = scripted
    .calls('terminus')
    .flatMap((call) => (call.requestBody as { messages?: { content: string }[] } | null)?.messages ?? [])
    .map((message) => message.content);
  return [...new Set([...prompts, ...TERMINUS_TURNS.map((turn) => turn.text)])];
}

describe('payload encryption end to end (ROLLOUT_PAYLOAD_KEY, rollout codec-server)', () => {
  before(async () => {
    const { client, connection } = await testTemporal();
    dir = await workspace({ examples: 'examples' });
    instruction = (await readFile(path.join(dir, 'examples/tasks/hello-world/instruction.md'), 'utf8')).trim();
    const job = parse(await readFile(path.join(dir, 'examples', 'job.yaml'), 'utf8')) as Record<string, unknown>;
    scripted = await startScriptedModelServer({ host: '127.0.0.1', port: 0 });
    scripted.session('terminus', { turns: TERMINUS_TURNS });
    const terminus = {
      name: 'terminus',
      model: 'scripted-model',
      env: { OPENAI_BASE_URL: `${scripted.url}/s/terminus/v1`, OPENAI_API_KEY: '${ROLLOUT_TEST_KEY}' },
    };
    const only = {
      ...job,
      name: jobName,
      n_concurrent_trials: 3,
      agents: [...(job.agents as unknown[]), terminus],
      datasets: [{ path: 'tasks', task_names: ['hello-world'] }],
    };
    await writeFile(path.join(dir, 'examples', 'job.yaml'), stringify(only));
    run = await runCli(['examples/job.yaml'], {
      cwd: dir,
      env: { ROLLOUT_PAYLOAD_KEY: KEY, ROLLOUT_TEST_KEY: MODEL_KEY },
    });
    for (const id of [
      `rollout-job/${jobName}`,
      `${jobName}/hello-world__greeter__1`,
      `${jobName}/hello-world__oracle__1`,
      `${jobName}/hello-world__terminus__1`,
    ])
      histories.set(id, await client.workflow.getHandle(id).fetchHistory());
    await connection.close();
  });
  after(async () => {
    await scripted.close();
    await removeJobLeftovers(jobName);
  });

  it('runs the job with the key', () => {
    assert.equal(run.code, 0, run.stderr);
    assert.match(run.stderr, /3\/3 done/);
  });

  it('terminus solved the task with model calls through the gateway (its records), the prompt holding the instruction and the command output', async () => {
    const trialDir = path.join(dir, 'jobs', jobName, 'hello-world__terminus__1');
    const result = JSON.parse(await readFile(path.join(trialDir, 'result.json'), 'utf8')) as TrialResult;
    assert.deepEqual(result.rewards, { reward: 1 }, JSON.stringify(result.error));
    const served = scripted.calls('terminus').filter((call) => call.status === 200 && call.turnIndex !== null);
    assert.ok(served.length >= 3, `${served.length} model calls served`);
    assert.deepEqual([...new Set(served.map((call) => call.credential))], [MODEL_KEY]);
    const records = (await readFile(path.join(trialDir, 'agent', 'llm-calls.jsonl'), 'utf8'))
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as LlmCallRecord);
    assert.equal(records.length, served.length, 'one gateway record per model call');
    const prompts = modelCallTexts().join('\n');
    assert.ok(prompts.includes(instruction) && prompts.includes(OUTPUT_MARKER), 'the prompts hold what is checked');
  });

  it('writes every payload encrypted: no plaintext of the instruction, the config, the results or the model calls', () => {
    for (const [id, history] of histories) {
      const payloads = payloadsOf(history);
      assert.ok(payloads.length > 5, `${id}: payloads found (${payloads.length})`);
      const plain = payloads.filter((payload) => payload.encoding !== 'binary/encrypted');
      assert.deepEqual(
        plain.map((payload) => `${payload.where}: ${payload.encoding}`),
        [],
        `${id}: payloads not encrypted`
      );
      const texts = [historyToJSON(history), ...textsOf(history)];
      const secrets = [instruction, 'Hello, world!', '"rewards"', 'installed greeter', '"n_llm_calls"'];
      const found = plaintextIn(texts, [...secrets, REPLY_MARKER, OUTPUT_MARKER, ...modelCallTexts()]);
      assert.equal(found, undefined, `${id}: history holds plaintext`);
    }
  });

  it('rollout jobs without the key: the encrypted job is listed as unreadable, the others as before', async () => {
    const jobs = await runCli(['jobs'], { cwd: dir });
    assert.equal(jobs.code, 0, jobs.stderr);
    assert.match(jobs.stdout, new RegExp(`^${jobName}\\s+unreadable\\s`, 'm'));
    assert.match(jobs.stderr, /its result could not be read/);
  });

  it('rollout codec-server decodes them (CORS for the UI), the model calls included; a wrong key cannot', async () => {
    const encoded = payloadsOf(histories.get(`${jobName}/hello-world__terminus__1`)).map((payload) => ({
      metadata: Object.fromEntries(
        Object.entries(payload.metadata).map(([key, value]) => [key, Buffer.from(value).toString('base64')])
      ),
      data: Buffer.from(payload.data).toString('base64'),
    }));
    const body = JSON.stringify({ payloads: encoded });
    const decodeWith = async (key: string) => {
      const server = startCli(['codec-server', '--port', String(CODEC_PORT)], {
        cwd: dir,
        env: { ROLLOUT_PAYLOAD_KEY: key },
        timeoutMs: 60_000,
      });
      try {
        const url = `http://127.0.0.1:${CODEC_PORT}/decode`;
        for (let i = 0; ; i++) {
          const answer = await fetch(url, {
            method: 'POST',
            headers: { 'Content-Type': 'application/json', 'X-Namespace': 'default', Origin: 'http://localhost:8233' },
            body,
          }).catch((err: Error) => (i < 100 ? undefined : Promise.reject(err)));
          if (answer) return answer;
          await new Promise((resolve) => setTimeout(resolve, 200));
        }
      } finally {
        server.kill('SIGTERM');
        await server.output;
      }
    };
    const answer = await decodeWith(KEY);
    assert.equal(answer.status, 200);
    assert.equal(answer.headers.get('access-control-allow-origin'), 'http://localhost:8233');
    const decoded = (await answer.json()) as { payloads: { metadata: Record<string, string>; data: string }[] };
    assert.equal(decoded.payloads.length, encoded.length);
    const encodings = new Set(decoded.payloads.map((p) => Buffer.from(p.metadata.encoding!, 'base64').toString()));
    assert.ok(!encodings.has('binary/encrypted'), [...encodings].join(', '));
    const plain = decoded.payloads.map((payload) => Buffer.from(payload.data, 'base64').toString());
    // What the encrypted history holds, readable again: the trial's config (its agent's model) and its results.
    for (const expected of [jobName, 'scripted-model'])
      assert.ok(plaintextIn(plain, [expected]), `decoded payloads hold "${expected}"`);

    const wrong = await decodeWith(randomBytes(32).toString('base64'));
    assert.equal(wrong.status, 400);
    assert.match(await wrong.text(), /encrypted with key [0-9a-f]{16}, which is neither ROLLOUT_PAYLOAD_KEY/);
  });
});
