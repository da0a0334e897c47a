/**
 * Training-grade tokens from an unmodified CLI agent (docs/rl.md): mini-swe-agent, installed from PyPI as users get
 * it, runs hello-world three times, one trial at a time, with `tokens: true`, `sampling` and two `replicas`, against
 * the scripted model server answering as vLLM does when asked for token ids (a stand-in: no model runs; its ids come
 * from a deterministic ChatML tokenization, test/support/vllm-tokens.ts). Once the first trial has finished,
 * `rollout ctl <job> policy-version 2` changes the job's policy version mid-job.
 *
 * Checked from what the server received and from `rollout export <job> --format rl`: each trial's token view is one
 * exact segment (each call's prompt ids = the segment so far, its sampled ids under loss-mask 1s, as many logprobs
 * as 1s); every call carried `X-Session-ID: <job>/<trial>` and went to the one replica its trial was pinned to; the
 * server received the job's sampling, whatever the agent sent; the version changed by ctl shows on later calls only.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readFile, readdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import type { Connection } from '@temporalio/client';
import { stringify } from 'yaml';

import type { CliRun } from '../support/cli';
import { runCli, startCli, workspace } from '../support/cli';
import { removeJobLeftovers } from '../support/docker';
import type { RecordedCall, ScriptedModelServer } from '../support/scripted-model-server';
import { startScriptedModelServer } from '../support/scripted-model-server';
import { testTemporal } from '../support/temporal';
import { waitFor } from '../support/wait';

const jobName = `tokens-${process.pid}`;
const JOB_TIMEOUT_MS = 30 * 60_000;
const KEY = `sk-real-${randomBytes(12).toString('hex')}`;
const TRIALS = 3;
const SAMPLING = { temperature: 0.7, top_p: 0.9, max_tokens: 512 };
/** Three turns: a look around, the fix, mini-swe-agent's submit. */
const TURNS = [
  { shell: 'ls /app' },
  { shell: "printf 'Hello, world!' > /app/hello.txt" },
  { shell: 'echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT' },
];
const REPLICAS = ['replica-a', 'replica-b'];

interface Segment {
  split: string | null;
  prompt_ids: number[];
  response_ids: number[];
  loss_mask: number[];
  logprobs: number[] | null;
  calls: { seq: number; policy_version?: number; response_start: number; response_end: number }[];
}
interface RlCall {
  seq: number;
  started_at: string;
  policy_version?: number;
  prompt_token_ids?: number[];
  completion_token_ids?: number[];
  logprobs?: number[];
}
interface RlRow {
  trial_name: string;
  reward: number | null;
  calls: RlCall[];
  tokens: { segments: Segment[]; splits: Record<string, number>; calls_without_tokens: number } | null;
}

let connection: Connection;
let dir: string;
let server: ScriptedModelServer;
let run: CliRun;
let firstFinished: string;
let versionChangedAt: number;
let rows: RlRow[];
const jobDir = () => path.join(dir, 'jobs', jobName);
/** The generation calls the server answered (not the preflight's probes, which carry no session id), by replica. */
const generationCalls = (): (RecordedCall & { replica: string })[] =>
  REPLICAS.flatMap((replica) =>
    server
      .calls(replica)
      .filter((call) => call.turnIndex !== null && call.sessionHeader !== null)
      .map((call) => ({ ...call, replica }))
  );

async function finishedTrials(): Promise<string[]> {
  const names = (await readdir(jobDir(), { withFileTypes: true })).filter((entry) => entry.isDirectory());
  const finished = await Promise.all(
    names.map((entry) =>
      readFile(path.join(jobDir(), entry.name, 'result.json'), 'utf8').then(
        () => entry.name,
        (err: NodeJS.ErrnoException) => {
          if (err.code === 'ENOENT') return null;
          throw err;
        }
      )
    )
  );
  return finished.filter((name): name is string => name !== null);
}

describe('training tokens from a real CLI agent through the gateway (scripted vLLM stand-in)', () => {
  before(
    async () => {
      ({ connection } = await testTemporal());
      server = await startScriptedModelServer({ host: '127.0.0.1', port: 0 });
      const replicas = REPLICAS.map((replica) => server.session(replica, { turns: TURNS }).openAiBaseUrl);
      dir = await workspace({ 'tasks/hello-world': 'examples/tasks/hello-world' });
      const job = {
        name: jobName,
        n_attempts: TRIALS,
        n_concurrent_trials: 1,
        policy_version: 1,
        // mini-swe-agent's Python start-up is slow on a busy 2-core host.
        timeout_multiplier: 6,
        environment: { type: 'docker', delete: true },
        agents: [
          {
            name: 'mini-swe-agent',
            model: 'scripted-model',
            env: { OPENAI_BASE_URL: replicas[0], OPENAI_API_KEY: '${ROLLOUT_TEST_KEY}' },
            tokens: true,
            sampling: SAMPLING,
            replicas,
          },
        ],
        datasets: [{ path: 'tasks' }],
      };
      await writeFile(path.join(dir, 'job.yaml'), stringify(job));
      const cli = startCli(['job.yaml'], { cwd: dir, env: { ROLLOUT_TEST_KEY: KEY }, timeoutMs: JOB_TIMEOUT_MS });
      // The first trial to finish ran wholly under version 1; then the version changes while the job runs.
      await waitFor(
        'a first finished trial',
        async () => {
          const finished = await finishedTrials().catch((err: NodeJS.ErrnoException) => {
            if (err.code === 'ENOENT') return [];
            throw err;
          });
          if (finished.length > 0) firstFinished = finished[0]!;
          return finished.length > 0 || cli.exitCode !== null;
        },
        JOB_TIMEOUT_MS
      );
      if (!firstFinished) {
        const ended = await cli.output;
        assert.fail(`the job ended before any trial finished (exit ${ended.code}):\n${ended.stdout}\n${ended.stderr}`);
      }
      const ctl = await runCli(['ctl', jobName, 'policy-version', '2'], { cwd: dir, timeoutMs: 120_000 });
      assert.equal(ctl.code, 0, `${ctl.stdout}\n${ctl.stderr}`);
      versionChangedAt = Date.now();
      run = await cli.output;
      const exported = await runCli(['export', jobDir(), '--format', 'rl'], { cwd: dir, timeoutMs: 120_000 });
      assert.equal(exported.code, 0, exported.stderr);
      rows = exported.stdout
        .trim()
        .split('\n')
        .map((line) => JSON.parse(line) as RlRow);
    },
    { timeout: JOB_TIMEOUT_MS + 5 * 60_000 }
  );
  after(async () => {
    await connection.close();
    await server.close();
    await removeJobLeftovers(jobName);
  });

  it('the job completes; every trial solves the task', () => {
    assert.equal(run.code, 0, `${run.stdout}\n${run.stderr}`);
    assert.equal(rows.length, TRIALS);
    for (const row of rows) assert.equal(row.reward, 1, row.trial_name);
  });

  it("each trial's token view is one exact segment: prompts extend the segment, 1s cover the sampled ids", () => {
    for (const row of rows) {
      assert.ok(row.tokens, `${row.trial_name}: no token view`);
      assert.deepEqual(row.tokens.splits, {}, row.trial_name);
      assert.equal(row.tokens.calls_without_tokens, 0, row.trial_name);
      assert.equal(row.tokens.segments.length, 1, row.trial_name);
      const [segment] = row.tokens.segments as [Segment];
      assert.ok(row.calls.length >= TURNS.length, `${row.trial_name}: ${row.calls.length} calls`);
      assert.equal(segment.calls.length, row.calls.length);
      assert.equal(segment.loss_mask.length, segment.response_ids.length);
      const sampled: number[] = [];
      for (const [i, placed] of segment.calls.entries()) {
        const call = row.calls.find((c) => c.seq === placed.seq)!;
        const sofar = [...segment.prompt_ids, ...segment.response_ids.slice(0, placed.response_start)];
        // A call's prompt is the segment so far, plus the tokens inserted since the previous completion (mask 0).
        assert.deepEqual(call.prompt_token_ids!.slice(0, sofar.length), sofar, `${row.trial_name} call ${i + 1}`);
        if (i > 0) assert.equal(call.prompt_token_ids!.length, sofar.length, `${row.trial_name} call ${i + 1}`);
        const span = segment.response_ids.slice(placed.response_start, placed.response_end);
        assert.deepEqual(span, call.completion_token_ids);
        assert.ok(segment.loss_mask.slice(placed.response_start, placed.response_end).every((bit) => bit === 1));
        sampled.push(...call.logprobs!);
      }
      const ones = segment.loss_mask.filter((bit) => bit === 1).length;
      assert.equal(
        ones,
        row.calls.reduce((n, call) => n + call.completion_token_ids!.length, 0)
      );
      assert.equal(segment.logprobs?.length, ones);
      assert.deepEqual(segment.logprobs, sampled);
    }
  });

  it('X-Session-ID is the trial on every call; each trial went to one replica', () => {
    const calls = generationCalls();
    const byTrial = new Map<string, Set<string>>();
    for (const call of calls) {
      const replicas = byTrial.get(call.sessionHeader!) ?? new Set<string>();
      replicas.add(call.replica);
      byTrial.set(call.sessionHeader!, replicas);
    }
    assert.deepEqual([...byTrial.keys()].sort(), rows.map((row) => `${jobName}/${row.trial_name}`).sort());
    for (const [trial, replicas] of byTrial) assert.equal(replicas.size, 1, `${trial}: ${[...replicas].join(', ')}`);
    const perTrial = rows.map((row) => calls.filter((c) => c.sessionHeader === `${jobName}/${row.trial_name}`));
    for (const [i, row] of rows.entries()) assert.equal(perTrial[i]!.length, row.calls.length, row.trial_name);
  });

  it('the server received the job’s sampling on every call, whatever mini-swe-agent sent', () => {
    for (const call of generationCalls()) {
      const body = call.requestBody as Record<string, unknown>;
      assert.equal(body.temperature, SAMPLING.temperature);
      assert.equal(body.top_p, SAMPLING.top_p);
      assert.equal(body.max_tokens ?? body.max_completion_tokens, SAMPLING.max_tokens);
      assert.equal(body.return_token_ids, true);
    }
  });

  it('the policy version changed by ctl mid-job shows on later calls only', () => {
    const first = rows.find((row) => row.trial_name === firstFinished)!;
    assert.ok(
      first.calls.every((call) => call.policy_version === 1),
      JSON.stringify(first.calls)
    );
    const later = rows.filter((row) => Date.parse(row.calls[0]!.started_at) > versionChangedAt);
    assert.ok(later.length > 0, 'no trial started after the version changed');
    for (const row of later)
      assert.ok(
        row.calls.every((call) => call.policy_version === 2),
        row.trial_name
      );
    for (const row of rows) {
      const versions = row.calls.map((call) => call.policy_version!);
      assert.deepEqual(versions, [...versions].sort(), `${row.trial_name}: ${versions.join(',')}`);
      assert.ok(versions.every((v) => v === 1 || v === 2));
    }
  });
});
