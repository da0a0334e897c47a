/**
 * A crashed CLI's rerun on the same machine carries on at once. `npx rollout job.yaml` killed with SIGKILL: the kill
 * reaches only npm, and its CLI (npm → sh → node) must stop with it and leave its worker queue to the rerun, which
 * takes it over without waiting for the host-lost timeout (set to an hour here, so waiting for it would fail the
 * test). A live process holding the queue instead (stopped, not dead) gets one line saying what the rerun waits for
 * and until when. Leases tell a dead holder from a live one by pid and start time. Real Temporal, Docker, npm, CLI.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readdirSync } from 'node:fs';
import { mkdtemp, readFile, readdir, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import type { Client, Connection } from '@temporalio/client';

import { runningTrialSteps } from '../../src/cli/inspect';
import { isStillRunning, readProcessStat } from '../../src/process-identity';
import type { TrialResult } from '../../src/results/trial-result';
import { leaseWorkerId } from '../../workers/host-lease';
import { cliEnv, runCli, startCli, workspace, writeOracleJob } from '../support/cli';
import { containersOfJob, removeJobLeftovers } from '../support/docker';
import { REPO_ROOT, testTemporal } from '../support/temporal';
import { waitFor, within } from '../support/wait';

let client: Client;
let connection: Connection;
const jobNames: string[] = [];
const HOUR_SEC = '3600';

async function slowJob(
  attempts: number
): Promise<{ dir: string; name: string; jobDir: string; env: Record<string, string> }> {
  const name = `crash-${randomBytes(3).toString('hex')}`;
  jobNames.push(name);
  const dir = await workspace({ tasks: 'test/fixtures/slow-tasks' });
  await writeOracleJob(dir, { name, n_attempts: attempts, n_concurrent_trials: 2 });
  // A host and lease folder of this test's own: no other test's process shares its queue.
  const env = { ROLLOUT_HOST_ID: `${name}-host`, ROLLOUT_LEASE_DIR: await mkdtemp(path.join(tmpdir(), 'leases-')) };
  return { dir, name, jobDir: path.join(dir, 'jobs', name), env };
}

async function rewards(jobDir: string): Promise<TrialResult[]> {
  const found: TrialResult[] = [];
  for (const entry of await readdir(jobDir, { withFileTypes: true }).catch(() => [])) {
    const file = path.join(jobDir, entry.name, 'result.json');
    if (entry.isDirectory() && existsSync(file)) found.push(JSON.parse(await readFile(file, 'utf8')) as TrialResult);
  }
  return found;
}

function agentRunning(name: string): () => Promise<boolean> {
  return async () => (await runningTrialSteps(client, name)).some((trial) => trial.step === 'execute');
}

/** The pid of the CLI npm runs (npm → sh → node, or npm → node once sh exec'd it). */
function cliUnder(npmPid: number): number | undefined {
  for (const entry of readdirSync('/proc')) {
    const pid = Number(entry);
    if (!Number.isInteger(pid)) continue;
    const stat = readProcessStat(pid);
    if (stat?.comm !== 'node') continue;
    const parent = readProcessStat(stat.ppid);
    if (stat.ppid === npmPid || parent?.ppid === npmPid) return pid;
  }
  return undefined;
}

describe('crash and rerun on the same machine', () => {
  before(async () => {
    ({ client, connection } = await testTemporal());
  });
  after(async () => {
    await connection.close();
    for (const name of jobNames) await removeJobLeftovers(name);
  });

  it('npx rollout killed mid-trial: its CLI stops with npm, and the rerun carries on without the host-lost wait', async () => {
    const { dir, name, jobDir, env } = await slowJob(4);
    // `npx rollout job.yaml` as a project depending on rollout-agents runs it: npm resolves the bin, runs it via sh.
    const npm = spawn('npm', ['exec', '--prefix', REPO_ROOT, '--no', '--', 'rollout', 'job.yaml'], {
      cwd: dir,
      env: cliEnv({ ...env, ROLLOUT_HOST_LOST_TIMEOUT_SEC: HOUR_SEC }),
      stdio: 'ignore',
    });
    let cli: number | undefined;
    await waitFor('the CLI under npm', () => (cli = cliUnder(npm.pid!)) !== undefined);
    await waitFor('an agent running', agentRunning(name));
    npm.kill('SIGKILL');
    await waitFor('the CLI stopping with npm', () => !isStillRunning(cli!, undefined), 30_000);
    assert.ok((await containersOfJob(name)).length >= 1, 'the dead CLI left its trials');

    const rerun = await runCli(['job.yaml'], {
      cwd: dir,
      env: { ...env, ROLLOUT_HOST_LOST_TIMEOUT_SEC: HOUR_SEC },
      timeoutMs: 8 * 60_000,
    });
    assert.equal(rerun.code, 0, rerun.stderr);
    assert.doesNotMatch(rerun.stderr, /^waiting: /m, 'nothing held the queue');
    const results = await rewards(jobDir);
    assert.equal(results.length, 4);
    for (const result of results) assert.deepEqual(result.rewards, { reward: 1 }, JSON.stringify(result.error));
    assert.deepEqual(await containersOfJob(name), []);
  });

  it('a live process holding the queue: the rerun says what it waits for and until when, then finishes', async () => {
    const { dir, name, jobDir, env } = await slowJob(2);
    // Short host-lost timeout: the stopped holder's trials move on soon enough for the test.
    const first = startCli(['job.yaml'], { cwd: dir, env: { ...env, ROLLOUT_HOST_LOST_TIMEOUT_SEC: '10' } });
    try {
      await waitFor('an agent running', agentRunning(name));
      first.kill('SIGSTOP'); // alive, holding its lease, serving nothing
      const rerun = await within(
        8 * 60_000,
        'the rerun',
        runCli(['job.yaml'], { cwd: dir, env: { ...env, ROLLOUT_HOST_LOST_TIMEOUT_SEC: '10' } })
      );
      assert.equal(rerun.code, 0, rerun.stderr);
      // One line for the trials it holds, one for the images it built (removed at the job's end), each with a time.
      const holder = `waiting: rollout process ${first.pid} on this host, still alive, holds worker queue "${name}-host": `;
      const waiting = rerun.stderr.split('\n').filter((line) => line.includes('waiting: '));
      assert.equal(waiting.length, 2, rerun.stderr);
      assert.ok(waiting[0]!.includes(holder), waiting[0]);
      assert.match(waiting[0]!, /trials it started .* by \d\d:\d\d:\d\d UTC \(host-lost timeout 10 s/);
      assert.ok(waiting[1]!.includes(holder), waiting[1]);
      assert.match(waiting[1]!, /the images it built for this job .* left behind at \d\d:\d\d:\d\d UTC$/);
      const results = await rewards(jobDir);
      assert.equal(results.length, 2);
      for (const result of results) assert.deepEqual(result.rewards, { reward: 1 }, JSON.stringify(result.error));
    } finally {
      first.kill('SIGKILL');
      await first.output;
    }
  });

  it("leases: a holder's pid reused by another process is a dead holder; a live one is reported", async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'leases-'));
    process.env.ROLLOUT_LEASE_DIR = dir;
    try {
      const file = (id: string) => path.join(dir, `dep-${encodeURIComponent(id)}.pid`);
      // This test's own pid, with a start time it does not have: the pid now runs another process.
      const own = readProcessStat(process.pid)!;
      await writeFile(file('reuse-host'), `${process.pid} ${Number(own.startTime) - 1}\n`);
      const takeover = await leaseWorkerId('reuse-host', 'dep');
      assert.equal(takeover.workerId, 'reuse-host');
      assert.deepEqual(takeover.heldBy, []);
      // The same pid and start time: alive, so the next process takes the next id and says who holds the first.
      const second = await leaseWorkerId('reuse-host', 'dep');
      assert.equal(second.workerId, 'reuse-host~2');
      assert.deepEqual(second.heldBy, [{ workerId: 'reuse-host', pid: process.pid, startTime: own.startTime }]);
      await second.release();
      await takeover.release();
    } finally {
      delete process.env.ROLLOUT_LEASE_DIR;
    }
  });
});
