/**
 * Jobs in an object store, end to end, with a real S3-compatible server (MinIO, test/support/minio.ts) and a real
 * Temporal server: the CLI submits and three workers run the trials, each a separate process with its own working
 * folder and HOME, sharing no path with the CLI (the job's dataset folder is removed once the job is submitted).
 */
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import type { TrialResult } from '../../src/results/trial-result';
import { providerQueue } from '../../src/contracts/queues';
import { runCli, startCli } from '../support/cli';
import type { E2BStandIn } from '../environments/e2b/e2b-stand-in';
import { startE2BStandIn } from '../environments/e2b/e2b-stand-in';
import type { TestStore } from '../support/minio';
import { startTestStore } from '../support/minio';
import type { Machine, RunningWorker } from '../support/store-machines';
import {
  machine,
  readObject,
  startWorker,
  stopWorkers,
  trialFolders,
  waitUntilPolling,
  workerMachines,
} from '../support/store-machines';
import { TEST_SERVER, startTestServer } from '../support/temporal';
import { waitFor, within } from '../support/wait';

const BUCKET = `rollout-e2e-${TEST_SERVER.port}`;
const JOBS_URL = `s3://${BUCKET}/evals/jobs`;
const JOBS_PREFIX = 'evals/jobs/';

const TRAJECTORY = JSON.stringify({
  schema_version: 'ATIF-v1.4',
  session_id: 'echo',
  agent: { name: 'echo' },
  steps: [
    { step_id: 1, source: 'user', message: 'Write ok to answer.txt.' },
    { step_id: 2, source: 'agent', message: 'ok' },
  ],
});

/**
 * A local dataset of `tasks` trivial tasks (host processes: the `local` environment keeps 30 trials cheap; with a
 * `dockerfile`, tasks for a sandbox, whose logs folder is /logs).
 */
async function writeTasks(dir: string, tasks: number, dockerfile?: string): Promise<void> {
  for (let index = 1; index <= tasks; index++) {
    const task = path.join(dir, `task-${index}`);
    await mkdir(path.join(task, 'tests'), { recursive: true });
    await writeFile(path.join(task, 'task.toml'), 'version = "1.0"\n[agent]\ntimeout_sec = 120.0\n');
    // Each task its own content: the store holds one archive per content.
    await writeFile(path.join(task, 'instruction.md'), `Write ok to answer.txt (task ${index}).`);
    await writeFile(
      path.join(task, 'tests', 'test.sh'),
      'if [ "$(cat answer.txt)" = ok ]; then echo 1; else echo 0; fi > "${ROLLOUT_LOGS_DIR:-/logs}/verifier/reward.txt"\n'
    );
    if (dockerfile) {
      await mkdir(path.join(task, 'environment'));
      await writeFile(path.join(task, 'environment', 'Dockerfile'), dockerfile);
    }
  }
}

function jobYaml(
  name: string,
  attempts: number,
  concurrency: number,
  execute: string,
  environment = ['type: local']
): string {
  return [
    `name: ${name}`,
    `jobs_dir: ${JOBS_URL}`,
    `n_attempts: ${attempts}`,
    `n_concurrent_trials: ${concurrency}`,
    'environment:',
    ...environment.map((line) => `  ${line}`),
    'agents:',
    '  - name: echo',
    '    execute: |',
    ...execute.split('\n').map((line) => `      ${line}`),
    'datasets:',
    '  - path: tasks',
    '',
  ].join('\n');
}

/** Where a worker keeps the trial folders of the store's jobs while they run (under its own HOME). */
function workingRoot(m: Machine): string {
  return path.join(m.home, '.cache', 'rollout', 'store', BUCKET, 'evals', 'jobs');
}

/** The worker whose working folder holds `relative` (e.g. a running trial's folder), if any. */
function holderOf(workers: RunningWorker[], relative: string): RunningWorker | undefined {
  return workers.find((worker) => existsSync(path.join(workingRoot(worker.machine), relative)));
}

/** A trial's result.json in the bucket. */
async function trialResult(store: TestStore, job: string, trial: string): Promise<TrialResult> {
  return JSON.parse(await readObject(store, BUCKET, `${JOBS_PREFIX}${job}/${trial}/result.json`)) as TrialResult;
}

describe('jobs in an object store (real MinIO, three worker processes)', { timeout: 15 * 60_000 }, () => {
  let store: TestStore;
  let root: string;
  let cliMachine: Machine;
  let workers: RunningWorker[] = [];

  before(async () => {
    store = await startTestStore();
    await store.createBucket(BUCKET);
    await startTestServer();
    root = await mkdtemp(path.join(tmpdir(), 'rollout-storage-'));
    cliMachine = await machine(root, 'cli', store.env);
    workers = (await workerMachines(root, ['w1', 'w2', 'w3'], store.env)).map((m) => startWorker(m));
  });

  after(async () => {
    await stopWorkers(workers);
    await store?.stop();
    if (root) await rm(root, { recursive: true, force: true });
  });

  test('bad credentials or an unreachable endpoint: one line naming the URL, exit 3, before any trial', async () => {
    await writeTasks(path.join(cliMachine.dir, 'tasks'), 1);
    await writeFile(path.join(cliMachine.dir, 'refused.yaml'), jobYaml('refused', 1, 1, 'echo ok > answer.txt'));
    const cases = {
      'refused credentials': { AWS_SECRET_ACCESS_KEY: 'not-the-secret' },
      'no such endpoint': { AWS_ENDPOINT_URL: `http://127.0.0.1:${TEST_SERVER.port + 29}` },
    };
    for (const [name, env] of Object.entries(cases)) {
      const run = await runCli(['refused.yaml', '--no-worker'], {
        cwd: cliMachine.dir,
        env: { ...cliMachine.env, ...env },
      });
      assert.equal(run.code, 3, `${name}: ${run.stderr}`);
      const lines = run.stderr.trim().split('\n');
      assert.equal(lines.length, 1, `${name}: one line: ${run.stderr}`);
      assert.match(
        lines[0]!,
        new RegExp(`^error: ${JOBS_URL.replace(/[/.]/g, '\\$&')}: the object store cannot be used`)
      );
      assert.doesNotMatch(run.stderr, /not-the-secret/, 'the secret is never printed');
    }
    assert.equal((await store.objects(BUCKET, `${JOBS_PREFIX}refused`)).size, 0, 'nothing of the job in the store');
  });

  test('a malformed s3:// URL: exit 2 naming jobs_dir', async () => {
    const cases = {
      'not a bucket name': jobYaml('refused', 1, 1, 'true').replace(JOBS_URL, 's3://Not_A_Bucket/x'),
    };
    for (const [name, yaml] of Object.entries(cases)) {
      await writeFile(path.join(cliMachine.dir, 'refused.yaml'), yaml);
      const run = await runCli(['refused.yaml', '--no-worker'], { cwd: cliMachine.dir, env: cliMachine.env });
      assert.equal(run.code, 2, `${name}: ${run.stderr}`);
      assert.match(run.stderr, /^error: \/.*refused\.yaml: jobs_dir: s3:\/\//, name);
      assert.equal(run.stderr.trim().split('\n').length, 1, `${name}: one line: ${run.stderr}`);
    }
    assert.equal((await store.objects(BUCKET, `${JOBS_PREFIX}refused`)).size, 0, 'nothing of the job in the store');
  });

  test('a 30-trial job runs on three workers; view, export, status and pull read it from the bucket', async () => {
    await rm(path.join(cliMachine.dir, 'tasks'), { recursive: true, force: true });
    await writeTasks(path.join(cliMachine.dir, 'tasks'), 3);
    const execute = `echo ok > answer.txt\nprintf '%s' '${TRAJECTORY}' > "$ROLLOUT_LOGS_DIR/agent/trajectory.json"`;
    await writeFile(path.join(cliMachine.dir, 'job.yaml'), jobYaml('thirty', 10, 12, execute));
    const cli = startCli(['job.yaml', '--no-worker'], { cwd: cliMachine.dir, env: cliMachine.env });
    let submitted = '';
    cli.stderr!.on('data', (chunk: Buffer) => (submitted += chunk.toString()));
    cli.stdout!.on('data', (chunk: Buffer) => (submitted += chunk.toString()));
    await waitFor('the job submitted', () => /30 trials → s3:\/\//.test(submitted) || cli.exitCode !== null, 120_000);
    // Submitted: the dataset exists nowhere but in the store now.
    await rm(path.join(cliMachine.dir, 'tasks'), { recursive: true, force: true });
    const run = await within(10 * 60_000, 'the 30-trial job', cli.output);
    assert.equal(run.code, 0, `${run.stdout}\n${run.stderr}\n${workers.map((w) => w.log()).join('\n')}`);

    const folders = await trialFolders(store, BUCKET, `${JOBS_PREFIX}thirty/`);
    assert.equal(folders.size, 30, [...folders.keys()].join(', '));
    const hosts = new Set<string | null>();
    for (const [trial, files] of folders) {
      for (const file of ['result.json', 'trial.log', 'agent/trajectory.json', 'verifier/reward.txt']) {
        assert.ok(files.has(file), `${trial} has ${file}: ${[...files.keys()].join(', ')}`);
      }
      const result = await trialResult(store, 'thirty', trial);
      assert.deepEqual(result.rewards, { reward: 1 }, `${trial}: ${JSON.stringify(result.error)}`);
      hosts.add(result.host);
    }
    assert.equal(hosts.size, 3, `every worker ran trials: ${[...hosts].join(', ')}`);
    const jobResult = JSON.parse(await readObject(store, BUCKET, `${JOBS_PREFIX}thirty/result.json`)) as {
      n_finished_trials: number;
    };
    assert.equal(jobResult.n_finished_trials, 30);
    const config = await store.objects(BUCKET, `${JOBS_PREFIX}thirty/config.json`);
    assert.deepEqual(
      [...config.keys()].sort(),
      [`${JOBS_PREFIX}thirty/config.json`, `${JOBS_PREFIX}thirty/config.json.sig`],
      'config.json in the store, signed'
    );
    // The workers keep nothing of the trials once uploaded.
    for (const worker of workers) {
      const left: string[] = await readdir(path.join(workingRoot(worker.machine), 'thirty')).catch(() => []);
      assert.deepEqual(
        left.filter((name) => name.startsWith('task-')),
        [],
        `${worker.hostId} kept trial folders`
      );
    }

    // Resumed from the store (its dataset back, the same content): every trial is there, nothing runs or is sent again.
    await writeTasks(path.join(cliMachine.dir, 'tasks'), 3);
    const resumed = await runCli(['resume', `${JOBS_URL}/thirty`, '--no-worker'], {
      cwd: cliMachine.dir,
      env: cliMachine.env,
    });
    assert.equal(resumed.code, 0, resumed.stderr);
    assert.match(resumed.stderr + resumed.stdout, /3 local task\(s\) packed into .* \(0 sent/);
    assert.equal((await trialFolders(store, BUCKET, `${JOBS_PREFIX}thirty/`)).size, 30);
    assert.equal((await store.objects(BUCKET, `${JOBS_PREFIX}.rollout/tasks/`)).size, 3, 'one archive per task');

    // A reader on a fourth machine: status, export and view from the bucket alone.
    const reader = await machine(root, 'reader', store.env);
    const status = await runCli(['status', `${JOBS_URL}/thirty`], { cwd: reader.dir, env: reader.env });
    assert.equal(status.code, 0, status.stderr);
    assert.match(status.stdout, /job thirty: completed · 30\/30 finished/);
    const exported = await runCli(['export', `${JOBS_URL}/thirty`, '--format', 'atif'], {
      cwd: reader.dir,
      env: reader.env,
    });
    assert.equal(exported.code, 0, exported.stderr);
    const rows = exported.stdout
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as { extra: { rollout: object } });
    assert.equal(rows.length, 30);
    const view = startCli(['view', JOBS_URL, '--port', String(TEST_SERVER.port + 22)], {
      cwd: reader.dir,
      env: reader.env,
    });
    try {
      const base = `http://127.0.0.1:${TEST_SERVER.port + 22}`;
      await waitFor(
        'rollout view',
        () =>
          fetch(base).then(
            (r) => r.ok,
            () => false
          ),
        60_000
      );
      const jobPage = await (await fetch(`${base}/jobs/thirty`)).text();
      assert.match(jobPage, /task-2__echo__7/);
      const [trial] = [...folders.keys()];
      const trialPage = await fetch(`${base}/jobs/thirty/trials/${trial}`);
      assert.equal(trialPage.status, 200);
      const file = await fetch(`${base}/jobs/thirty/trials/${trial}/files/verifier/reward.txt`);
      assert.equal((await file.text()).trim(), '1');
    } finally {
      view.kill('SIGTERM');
      await view.output;
    }
    const pulled = await runCli(['pull', `${JOBS_URL}/thirty`, 'copy'], { cwd: reader.dir, env: reader.env });
    assert.equal(pulled.code, 0, pulled.stderr);
    assert.equal((await readdir(path.join(reader.dir, 'copy'))).filter((n) => n.startsWith('task-')).length, 30);
    const again = await runCli(['pull', `${JOBS_URL}/thirty`, 'copy'], { cwd: reader.dir, env: reader.env });
    assert.match(again.stdout, /: 0 files .*already there/, 'a second pull fetches nothing');
  });

  test('a worker killed mid-upload: the trial restarts elsewhere, one complete folder, nothing half-written read', async () => {
    await rm(path.join(cliMachine.dir, 'tasks'), { recursive: true, force: true });
    await writeTasks(path.join(cliMachine.dir, 'tasks'), 1);
    const bytes = 768 * 2 ** 20;
    const execute = `echo ok > answer.txt\nhead -c ${bytes} /dev/zero > "$ROLLOUT_LOGS_DIR/agent/big.bin"`;
    await writeFile(path.join(cliMachine.dir, 'big.yaml'), jobYaml('big', 1, 1, execute));
    const cli = startCli(['big.yaml', '--no-worker'], {
      cwd: cliMachine.dir,
      env: { ...cliMachine.env, ROLLOUT_HOST_LOST_TIMEOUT_SEC: '15' },
    });
    const trialPrefix = `${JOBS_PREFIX}big/task-1__echo__1/`;
    await waitFor(
      'the upload of big.bin under way',
      // (MinIO lists the multipart uploads of one object: its whole key.)
      async () =>
        (await store.uploadsUnderWay(BUCKET, `${trialPrefix}agent/big.bin`)).length > 0 || cli.exitCode !== null,
      5 * 60_000
    );
    const killed = holderOf(workers, 'big/task-1__echo__1/agent');
    assert.ok(killed, `a worker holds the trial folder it uploads (the job ended? ${cli.exitCode})`);
    killed.child.kill('SIGKILL');

    // Read while the trial is between hosts: no reader takes the half-uploaded folder for a trial.
    const reader = await machine(root, 'reader-big', store.env);
    const early = await runCli(['pull', `${JOBS_URL}/big`, 'copy'], { cwd: reader.dir, env: reader.env });
    assert.equal(early.code, 0, early.stderr);
    const earlyTrials: string[] = await readdir(path.join(reader.dir, 'copy')).catch(() => []);
    assert.ok(!earlyTrials.includes('task-1__echo__1'), 'the trial folder read before it was complete');

    const run = await within(10 * 60_000, 'the job after the kill', cli.output);
    assert.equal(run.code, 0, `${run.stdout}\n${run.stderr}`);
    const result = await trialResult(store, 'big', 'task-1__echo__1');
    assert.ok(result.restarts >= 1, `restarted: ${JSON.stringify(result)}`);
    assert.ok(!result.host?.includes(killed.hostId), `ran elsewhere than ${killed.hostId}: ${result.host}`);
    assert.deepEqual(result.rewards, { reward: 1 });
    const folders = await trialFolders(store, BUCKET, `${JOBS_PREFIX}big/`);
    assert.deepEqual([...folders.keys()], ['task-1__echo__1'], 'one folder for the trial');
    const files = folders.get('task-1__echo__1')!;
    assert.equal(files.get('agent/big.bin'), bytes, 'the large file whole');
    assert.ok(files.has('result.json') && files.has('trial.log'));
    workers = workers.filter((worker) => worker !== killed);
  });

  describe('on cloud sandboxes (E2B stand-in), two workers', () => {
    const dockerfile = 'FROM debian:bookworm-slim\nWORKDIR /app\n';
    const agentScript = 'echo ok > answer.txt\necho done > /logs/agent/note.txt';
    let standIn: E2BStandIn;
    let cloudWorkers: RunningWorker[] = [];
    const sandboxJob = async (name: string, tasks: number, attempts: number, execute: string) => {
      await rm(path.join(cliMachine.dir, 'tasks'), { recursive: true, force: true });
      await writeTasks(path.join(cliMachine.dir, 'tasks'), tasks, dockerfile);
      const yaml = jobYaml(name, attempts, tasks * attempts, execute, ['type: e2b', 'template_prefix: s3']);
      await writeFile(path.join(cliMachine.dir, `${name}.yaml`), yaml);
    };
    const cliEnv = () => ({ ...cliMachine.env, ...standIn.env, ROLLOUT_HOST_LOST_TIMEOUT_SEC: '15' });
    const workerOf = (host: string | null) => cloudWorkers.findIndex((worker) => host?.endsWith(`@${worker.hostId}`));

    before(async () => {
      standIn = await startE2BStandIn();
      const machines = await workerMachines(root, ['c1', 'c2'], { ...store.env, ...standIn.env });
      // Two trials each at most: a job of four runs on both.
      cloudWorkers = machines.map((m) => startWorker(m, ['e2b'], 2));
      // Both serving before a job starts, else the first up may take all its trials.
      await waitUntilPolling(cloudWorkers, providerQueue('e2b'));
    });

    after(async () => {
      await stopWorkers(cloudWorkers);
      await standIn?.stop();
    });

    test('each trial pinned to the worker that claims it, its whole folder in the bucket; status reads it', async () => {
      // Long enough that the four trials overlap.
      await sandboxJob('sandboxes', 2, 2, `sleep 3\n${agentScript}`);
      const run = await runCli(['sandboxes.yaml', '--no-worker'], { cwd: cliMachine.dir, env: cliEnv() });
      const logs = cloudWorkers.map((w) => w.log()).join('\n');
      assert.equal(run.code, 0, `${run.stdout}\n${run.stderr}\n${logs}`);
      const folders = await trialFolders(store, BUCKET, `${JOBS_PREFIX}sandboxes/`);
      assert.equal(folders.size, 4, [...folders.keys()].join(', '));
      const workersUsed = new Set<number>();
      for (const [trial, files] of folders) {
        for (const file of ['result.json', 'trial.log', 'agent/note.txt', 'verifier/reward.txt']) {
          assert.ok(files.has(file), `${trial} has ${file}: ${[...files.keys()].join(', ')}`);
        }
        const result = await trialResult(store, 'sandboxes', trial);
        assert.deepEqual(result.rewards, { reward: 1 }, `${trial}: ${JSON.stringify(result.error)}\n${logs}`);
        assert.equal(result.environment_type, 'e2b');
        // Its steps ran on one worker's host queue, not the shared one.
        assert.notEqual(workerOf(result.host), -1, `${trial} ran on ${result.host}`);
        workersUsed.add(workerOf(result.host));
      }
      assert.equal(workersUsed.size, 2, 'both workers ran trials');
      assert.deepEqual(await standIn.sandboxes(), [], 'no sandbox left');
      const status = await runCli(['status', `${JOBS_URL}/sandboxes`], { cwd: cliMachine.dir, env: cliMachine.env });
      assert.equal(status.code, 0, status.stderr);
      assert.match(status.stdout, /job sandboxes: completed · 4\/4 finished/);
    });

    test('a worker killed mid-trial: the trial restarts on the other, one complete folder, no sandbox left', async () => {
      await sandboxJob('sandbox-kill', 1, 1, `sleep 20\n${agentScript}`);
      const cli = startCli(['sandbox-kill.yaml', '--no-worker'], { cwd: cliMachine.dir, env: cliEnv() });
      const trial = 'task-1__echo__1';
      let killed: RunningWorker | undefined;
      await waitFor(
        'the trial in its sandbox, on a worker',
        async () => {
          if ((await standIn.sandboxes()).length > 0) killed = holderOf(cloudWorkers, `sandbox-kill/${trial}`);
          return killed !== undefined || cli.exitCode !== null;
        },
        5 * 60_000
      );
      assert.ok(killed, `a worker holds the trial (the job ended? ${cli.exitCode})`);
      killed.child.kill('SIGKILL');
      const run = await within(10 * 60_000, 'the job after the kill', cli.output);
      assert.equal(run.code, 0, `${run.stdout}\n${run.stderr}`);
      const result = await trialResult(store, 'sandbox-kill', trial);
      assert.ok(result.restarts >= 1, `restarted: ${JSON.stringify(result)}`);
      assert.equal(workerOf(result.host), 1 - cloudWorkers.indexOf(killed), `ran on the other: ${result.host}`);
      assert.deepEqual(result.rewards, { reward: 1 });
      const folders = await trialFolders(store, BUCKET, `${JOBS_PREFIX}sandbox-kill/`);
      assert.deepEqual([...folders.keys()], [trial], 'one folder for the trial');
      assert.ok(['result.json', 'trial.log', 'agent/note.txt'].every((file) => folders.get(trial)!.has(file)));
      assert.deepEqual(await standIn.sandboxes(), [], 'the killed attempt left no sandbox');
    });
  });
});
