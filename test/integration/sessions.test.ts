/**
 * Step-by-step sessions through `rollout serve` (the real CLI, real Temporal, real Docker containers): a scripted
 * client solves a task with bash steps and submit, a wrong answer scores 0, a long step is cut, a server kill between
 * steps loses nothing, and an idle session is reaped with its container.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import Docker from 'dockerode';

import type { TrialResult } from '../../src/results/trial-result';
import type { SessionRecord, SessionStep, StepOutcome } from '../../src/contracts/session';
import { runCli } from '../support/cli';
import { recordHistory } from '../support/histories';
import { validateWithHarbor } from '../support/harbor';
import { containersOfJob, removeJobLeftovers } from '../support/docker';
import { freePort, ServeProcess } from '../support/serve';
import { testTemporal } from '../support/temporal';
import { waitFor } from '../support/wait';

const TOKEN = `tok-${randomBytes(8).toString('hex')}`;
const serveName = `sessions-${randomBytes(3).toString('hex')}`;
let dir: string;
let server: ServeProcess;

/** A task on the local base image (no build): write 42 to /tmp/answer.txt. */
async function writeTask(tasks: string): Promise<void> {
  const task = path.join(tasks, 'answer');
  await mkdir(path.join(task, 'tests'), { recursive: true });
  await mkdir(path.join(task, 'environment'), { recursive: true });
  await writeFile(
    path.join(task, 'task.toml'),
    'version = "1.0"\n[environment]\ndocker_image = "debian:bookworm-slim"\n[verifier]\ntimeout_sec = 30.0\n'
  );
  await writeFile(path.join(task, 'environment', 'Dockerfile'), 'FROM debian:bookworm-slim\n');
  await writeFile(path.join(task, 'instruction.md'), 'Write 42 to /tmp/answer.txt.\n');
  await writeFile(
    path.join(task, 'tests', 'test.sh'),
    'if [ "$(cat /tmp/answer.txt)" = 42 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n'
  );
}

async function create(idle?: number, extra: Record<string, unknown> = {}): Promise<string> {
  const created = await server.json<{ session_id: string; prompt: string; tools: { function: { name: string } }[] }>(
    '/sessions',
    { body: { task: 'answer', ...(idle ? { idle_timeout_sec: idle } : {}), ...extra } }
  );
  assert.equal(created.http, 200, JSON.stringify(created.body));
  assert.equal(created.body.prompt, 'Write 42 to /tmp/answer.txt.\n');
  assert.deepEqual(
    created.body.tools.map((t) => t.function.name),
    ['bash', 'submit']
  );
  return created.body.session_id;
}

function step(id: string, name: string, args: unknown = {}, extra: Record<string, unknown> = {}) {
  return server.json<StepOutcome & { error?: string }>(`/sessions/${id}/step`, {
    body: { tool_call: { name, arguments: args }, ...extra },
  });
}

async function sessionContainers(id: string) {
  return (await containersOfJob(serveName)).filter((c) => Object.values(c.Labels).some((v) => v.includes(id)));
}

describe('rollout serve: step-by-step sessions', () => {
  before(async () => {
    const { connection } = await testTemporal();
    await connection.close();
    dir = await mkdtemp(path.join(tmpdir(), 'rollout-sessions-'));
    await writeTask(path.join(dir, 'tasks'));
    const port = await freePort();
    await writeFile(
      path.join(dir, 'serve.yaml'),
      [
        'dataset: tasks',
        `name: ${serveName}`,
        'jobs_dir: jobs',
        `port: ${port}`,
        'sessions:',
        '  step_timeout_sec: 2',
        '  output_limit_bytes: 1000',
        '',
      ].join('\n')
    );
    server = new ServeProcess(`http://127.0.0.1:${port}`, dir, TOKEN);
    await server.start();
  });
  after(async () => {
    await server.stop('SIGTERM');
    await removeJobLeftovers(serveName);
  });

  it('solves a task with bash steps and gets reward 1 from submit; the session then ends', async () => {
    const id = await create();
    const wrote = await step(id, 'bash', { command: 'echo 42 > /tmp/answer.txt' });
    assert.equal(wrote.http, 200);
    assert.equal(wrote.body.finished, false);
    // Arguments as OpenAI tool calls carry them: a JSON string.
    const read = await step(id, 'bash', JSON.stringify({ command: 'cat /tmp/answer.txt; echo oops >&2; exit 3' }));
    assert.equal(read.body.observation, '42\noops\n');
    assert.equal(read.body.info.exit_code, 3);
    const submitted = await step(id, 'submit');
    assert.deepEqual(
      { reward: submitted.body.reward, finished: submitted.body.finished },
      { reward: 1, finished: true }
    );
    assert.equal((await step(id, 'bash', { command: 'true' })).http, 404);

    const record = (await server.json<SessionRecord>(`/sessions/${id}`)).body;
    assert.equal(record.ended_by, 'submitted');
    assert.deepEqual(
      record.steps.map((s) => s.tool_call.name),
      ['bash', 'bash', 'submit']
    );
    await waitFor('the container to be removed', async () => (await sessionContainers(id)).length === 0, 60_000);
    const { client, connection } = await testTemporal();
    try {
      await client.workflow.getHandle(`${serveName}/session__${id}`).result();
      await recordHistory(client, `${serveName}/session__${id}`, 'session-solved');
    } finally {
      await connection.close();
    }
    // The same files as a trial's: result.json, the ATIF trajectory (Harbor validates it), and the session's record.
    const folder = path.join(dir, 'jobs', serveName, `session__${id}`);
    const saved = JSON.parse(await readFile(path.join(folder, 'session.json'), 'utf8')) as SessionRecord;
    assert.equal(saved.steps.length, 3);
    assert.ok(saved.steps.every((s) => s.started_at && typeof s.info.duration_ms === 'number'));
    const result = JSON.parse(await readFile(path.join(folder, 'result.json'), 'utf8')) as TrialResult;
    assert.deepEqual(
      { agent: result.agent_name, rewards: result.rewards },
      { agent: 'session', rewards: { reward: 1 } }
    );
    const checked = await validateWithHarbor(path.join(folder, 'agent', 'trajectory.json'));
    assert.equal(checked.code, 0, checked.output);

    // `rollout export --format rl` has the session's steps; sft its conversation.
    const exported = await runCli(
      ['export', path.join(dir, 'jobs', serveName), '--format', 'rl', '--agent', 'session'],
      {
        cwd: dir,
      }
    );
    assert.equal(exported.code, 0, exported.stderr);
    const row = exported.stdout
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as { trial_name: string; kind: string; reward: number; steps: SessionStep[] })
      .find((r) => r.trial_name === `session__${id}`)!;
    assert.deepEqual({ kind: row.kind, reward: row.reward }, { kind: 'session', reward: 1 });
    assert.deepEqual(
      row.steps.map((s) => [s.tool_call.name, s.observation]),
      [
        ['bash', ''],
        ['bash', '42\noops\n'],
        ['submit', 'verifier rewards: {"reward":1}'],
      ]
    );
    const sft = await runCli(['export', path.join(dir, 'jobs', serveName), '--format', 'sft', '--agent', 'session'], {
      cwd: dir,
    });
    const conversation = sft.stdout
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as { messages: { role: string }[]; metadata: { trial_name: string } })
      .find((r) => r.metadata.trial_name === `session__${id}`)!;
    assert.deepEqual(
      conversation.messages.map((m) => m.role),
      ['user', 'assistant', 'tool', 'assistant', 'tool', 'assistant', 'tool']
    );
  });

  it('scores a wrong answer 0', async () => {
    const id = await create();
    await step(id, 'bash', { command: 'echo 41 > /tmp/answer.txt' });
    const submitted = await step(id, 'submit');
    assert.equal(submitted.body.reward, 0);
    assert.equal(submitted.body.finished, true);
  });

  it('cuts a step that runs too long, and output past the limit, and says so', async () => {
    const id = await create();
    const slow = await step(id, 'bash', { command: 'echo started; sleep 60; echo never' });
    assert.equal(slow.http, 200);
    assert.equal(slow.body.info.timed_out, true);
    assert.match(slow.body.observation, /\[step timed out after 2 s; its processes were killed\]$/);
    assert.doesNotMatch(slow.body.observation, /never/);
    const loud = await step(id, 'bash', { command: 'yes | head -c 5000' });
    assert.equal(loud.body.info.truncated, true);
    assert.ok(loud.body.observation.startsWith('y\ny\n'));
    assert.match(loud.body.observation, /\[output cut at 1000 bytes\]$/);
    assert.ok(loud.body.observation.length < 1100);
    const after = await step(id, 'bash', { command: 'echo still here' });
    assert.equal(after.body.observation, 'still here\n');
    assert.equal((await server.json(`/sessions/${id}`, { method: 'DELETE' })).http, 200);
  });

  it('stamps each step with the policy version set at creation, and a bump between steps from then on', async () => {
    const id = await create(undefined, { policy_version: 7 });
    await step(id, 'bash', { command: 'echo 41 > /tmp/answer.txt' });
    // The trainer updated its weights: this step and the later ones carry 8.
    await step(id, 'bash', { command: 'echo 42 > /tmp/answer.txt' }, { policy_version: 8 });
    const live = (await server.json<SessionRecord>(`/sessions/${id}`)).body;
    assert.deepEqual([live.policy_version, live.steps.map((s) => s.policy_version)], [8, [7, 8]]);
    const bad = await step(id, 'bash', { command: 'true' }, { policy_version: -1 });
    assert.equal(bad.http, 400);
    assert.match(bad.body.error ?? '', /policy_version/);
    assert.equal((await step(id, 'submit')).body.reward, 1);
    const unversioned = await create();
    await step(unversioned, 'bash', { command: 'true' });
    assert.equal(
      (await server.json<SessionRecord>(`/sessions/${unversioned}`)).body.steps[0]!.policy_version,
      undefined
    );
    assert.equal((await server.json(`/sessions/${unversioned}`, { method: 'DELETE' })).http, 200);

    // session.json, the ATIF trajectory and `rollout export --format rl` carry each step's version.
    const folder = path.join(dir, 'jobs', serveName, `session__${id}`);
    await waitFor(
      'the session record',
      () =>
        readFile(path.join(folder, 'session.json')).then(
          () => true,
          () => false
        ),
      60_000
    );
    const saved = JSON.parse(await readFile(path.join(folder, 'session.json'), 'utf8')) as SessionRecord;
    assert.deepEqual(
      saved.steps.map((s) => s.policy_version),
      [7, 8, 8]
    );
    const trajectory = JSON.parse(await readFile(path.join(folder, 'agent', 'trajectory.json'), 'utf8')) as {
      steps: { source: string; extra?: { policy_version?: number } }[];
    };
    assert.deepEqual(
      trajectory.steps.filter((s) => s.source === 'agent').map((s) => s.extra?.policy_version),
      [7, 8, 8]
    );
    const exported = await runCli(
      ['export', path.join(dir, 'jobs', serveName), '--format', 'rl', '--agent', 'session'],
      {
        cwd: dir,
      }
    );
    assert.equal(exported.code, 0, exported.stderr);
    const row = exported.stdout
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as { trial_name: string; steps: SessionStep[] })
      .find((r) => r.trial_name === `session__${id}`)!;
    assert.deepEqual(
      row.steps.map((s) => s.policy_version),
      [7, 8, 8]
    );
  });

  it('runs the steps in one shell kept open in the container, each in a fresh subshell of it', async () => {
    const id = await create();
    const run = async (command: string) => (await step(id, 'bash', { command })).body;
    const workdir = (await run('pwd')).observation;
    // $$ in a subshell is the kept shell's pid: the same across steps (an exec per step would give a new one).
    const shellPid = (await run('cd /tmp; export CARRIED=1; echo $$')).observation;
    assert.equal(
      (await run('pwd; echo "carried=${CARRIED:-no}"; echo $$')).observation,
      `${workdir}carried=no\n${shellPid}`
    );
    // stdin is empty (a step cannot read the shell's own input), output and exit status are exact.
    assert.equal((await run('cat; echo read-done')).observation, 'read-done\n');
    const exact = await run("printf 'no newline'; exit 7");
    assert.deepEqual([exact.observation, exact.info.exit_code], ['no newline', 7]);
    // A step that kills the shell ends without a status; the next step gets a new shell.
    assert.equal((await run('kill -9 $$')).info.exit_code, null);
    const again = await run('echo $$');
    assert.equal(again.info.exit_code, 0);
    assert.notEqual(again.observation, shellPid);
    assert.equal((await server.json(`/sessions/${id}`, { method: 'DELETE' })).http, 200);
  });

  it('loses nothing when the server is killed between steps', async () => {
    const id = await create();
    await step(id, 'bash', { command: 'echo 42 > /tmp/answer.txt' });
    await server.stop('SIGKILL');
    await server.start();
    const read = await step(id, 'bash', { command: 'cat /tmp/answer.txt' });
    assert.equal(read.body.observation, '42\n');
    assert.equal((await step(id, 'submit')).body.reward, 1);
  });

  it('reaps an idle session and removes its container; unknown sessions are 404', async () => {
    const id = await create(2);
    assert.equal((await sessionContainers(id)).length, 1);
    await waitFor(
      'the idle session to end',
      async () => (await server.json<SessionRecord>(`/sessions/${id}`)).body.status === 'ended',
      60_000
    );
    assert.equal((await server.json<SessionRecord>(`/sessions/${id}`)).body.ended_by, 'idle');
    await waitFor('the container to be removed', async () => (await sessionContainers(id)).length === 0, 60_000);
    assert.equal((await step(id, 'bash', { command: 'true' })).http, 404);
    assert.equal((await step('no-such-session', 'bash', { command: 'true' })).http, 404);
  });
});

describe('rollout serve: the warm pool', () => {
  const poolName = `pool-${randomBytes(3).toString('hex')}`;
  let pool: ServeProcess;
  const parked = async () => (await containersOfJob(poolName)).filter((c) => c.State === 'running');

  before(async () => {
    const poolDir = await mkdtemp(path.join(tmpdir(), 'rollout-pool-'));
    await writeTask(path.join(poolDir, 'tasks'));
    const port = await freePort();
    await writeFile(
      path.join(poolDir, 'serve.yaml'),
      [
        'dataset: tasks',
        `name: ${poolName}`,
        'jobs_dir: jobs',
        `port: ${port}`,
        'sessions:',
        '  warm_pool: { answer: 2 }',
        '',
      ].join('\n')
    );
    pool = new ServeProcess(`http://127.0.0.1:${port}`, poolDir, TOKEN);
    await pool.start();
  });
  after(async () => {
    await pool.stop('SIGTERM');
    await removeJobLeftovers(poolName);
  });

  it('hands out parked sessions, never a dead one, refills, and removes them at shutdown', async () => {
    await waitFor('2 parked containers', async () => (await parked()).length === 2, 120_000);
    // Kill both parked containers: the pool must not hand either out.
    const docker = new Docker();
    for (const container of await parked()) await docker.getContainer(container.Id).kill();
    const first = await pool.json<{ session_id: string }>('/sessions', { body: { task: 'answer' } });
    assert.equal(first.http, 200);
    // Whatever it got (a refill parked meanwhile, or a cold start), it is alive.
    const alive = await pool.json<StepOutcome>(`/sessions/${first.body.session_id}/step`, {
      body: { tool_call: { name: 'bash', arguments: { command: 'echo alive' } } },
    });
    assert.equal(alive.body.observation, 'alive\n');
    await pool.json(`/sessions/${first.body.session_id}`, { method: 'DELETE' });

    await waitFor('the pool to refill', async () => (await parked()).length >= 2, 120_000);
    const second = await pool.json<{ session_id: string }>('/sessions', {
      body: { task: 'answer', policy_version: 3 },
    });
    const record = (await pool.json<SessionRecord>(`/sessions/${second.body.session_id}`)).body;
    assert.equal(record.warm, true);
    const echoed = await pool.json<StepOutcome>(`/sessions/${second.body.session_id}/step`, {
      body: { tool_call: { name: 'bash', arguments: { command: 'echo warm' } } },
    });
    assert.equal(echoed.body.observation, 'warm\n');
    // A parked session takes the claimer's policy version.
    const stamped = (await pool.json<SessionRecord>(`/sessions/${second.body.session_id}`)).body;
    assert.deepEqual(
      stamped.steps.map((s) => s.policy_version),
      [3]
    );

    await pool.json(`/sessions/${second.body.session_id}`, { method: 'DELETE' });
    await pool.stop('SIGTERM');
    assert.deepEqual(
      (await containersOfJob(poolName)).map((c) => c.Labels),
      [],
      'containers left after shutdown'
    );
  });
});
