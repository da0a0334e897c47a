/**
 * Payload encryption (ROLLOUT_PAYLOAD_KEY) end to end, for real: the examples' hello-world task with the oracle and
 * the custom agent, run by the CLI and its worker on the tests' Temporal server and Docker. Every payload of the Job's
 * and the Trials' histories is encrypted (no plaintext of the task's instruction, the job's config or the results);
 * `rollout codec-server` decodes them with the key, and a wrong key cannot.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import { historyToJSON } from '@temporalio/common/lib/proto-utils';
import type { temporal } from '@temporalio/proto';
import { parse, stringify } from 'yaml';

import type { CliRun } from '../support/cli';
import { runCli, startCli, workspace } from '../support/cli';
import { removeJobLeftovers } from '../support/docker';
import { testTemporal } from '../support/temporal';

const jobName = `encrypted-${randomBytes(3).toString('hex')}`;
const KEY = randomBytes(32).toString('base64');
const CODEC_PORT = Number(process.env.ROLLOUT_TEST_TEMPORAL_PORT ?? 17233) + 300;
let dir: string;
let run: CliRun;
let instruction: string;
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

describe('payload encryption end to end (ROLLOUT_PAYLOAD_KEY, rollout codec-server)', () => {
  before(async () => {
    const { client, connection } = await testTemporal();
    dir = await workspace({ examples: 'examples' });
    instruction = (await readFile(path.join(dir, 'examples/tasks/hello-world/instruction.md'), 'utf8')).trim();
    const job = parse(await readFile(path.join(dir, 'examples', 'job.yaml'), 'utf8')) as Record<string, unknown>;
    const only = { ...job, name: jobName, datasets: [{ path: 'tasks', task_names: ['hello-world'] }] };
    await writeFile(path.join(dir, 'examples', 'job.yaml'), stringify(only));
    run = await runCli(['examples/job.yaml'], { cwd: dir, env: { ROLLOUT_PAYLOAD_KEY: KEY } });
    for (const id of [
      `rollout-job/${jobName}`,
      `${jobName}/hello-world__greeter__1`,
      `${jobName}/hello-world__oracle__1`,
    ])
      histories.set(id, await client.workflow.getHandle(id).fetchHistory());
    await connection.close();
  });
  after(() => removeJobLeftovers(jobName));

  it('runs the job with the key', () => {
    assert.equal(run.code, 0, run.stderr);
    assert.match(run.stderr, /2\/2 done/);
  });

  it('writes every payload encrypted: no plaintext of the instruction, the config or the results', () => {
    for (const [id, history] of histories) {
      const payloads = payloadsOf(history);
      assert.ok(payloads.length > 5, `${id}: payloads found (${payloads.length})`);
      const plain = payloads.filter((payload) => payload.encoding !== 'binary/encrypted');
      assert.deepEqual(
        plain.map((payload) => `${payload.where}: ${payload.encoding}`),
        [],
        `${id}: payloads not encrypted`
      );
      const raw = historyToJSON(history);
      for (const secret of [instruction, 'Hello, world!', '"rewards"', 'installed greeter'])
        assert.ok(!raw.includes(secret), `${id}: history holds "${secret}"`);
    }
  });

  it('rollout jobs without the key: the encrypted job is listed as unreadable, the others as before', async () => {
    const jobs = await runCli(['jobs'], { cwd: dir });
    assert.equal(jobs.code, 0, jobs.stderr);
    assert.match(jobs.stdout, new RegExp(`^${jobName}\\s+unreadable\\s`, 'm'));
    assert.match(jobs.stderr, /its result could not be read/);
  });

  it('rollout codec-server decodes them (CORS for the UI); a wrong key cannot', async () => {
    const [first] = payloadsOf(histories.get(`rollout-job/${jobName}`));
    const body = JSON.stringify({
      payloads: [
        {
          metadata: Object.fromEntries(
            Object.entries(first!.metadata).map(([key, value]) => [key, Buffer.from(value).toString('base64')])
          ),
          data: Buffer.from(first!.data).toString('base64'),
        },
      ],
    });
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
    const payload = decoded.payloads[0]!;
    assert.equal(Buffer.from(payload.metadata.encoding!, 'base64').toString(), 'json/plain');
    assert.match(Buffer.from(payload.data, 'base64').toString(), new RegExp(jobName));

    const wrong = await decodeWith(randomBytes(32).toString('base64'));
    assert.equal(wrong.status, 400);
    assert.match(await wrong.text(), /encrypted with key [0-9a-f]{16}, which is neither ROLLOUT_PAYLOAD_KEY/);
  });
});
