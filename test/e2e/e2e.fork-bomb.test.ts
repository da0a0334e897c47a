/**
 * An agent that runs a fork bomb (bounded by the container's pids limit), through the real stack (CLI, Temporal,
 * Docker), as in e2e.hostile: once every pid of the limit is taken no process can start in the container, so killing
 * the agent's processes with a command fails. Rollout must still kill them all (the docker provider restarts the
 * container, which keeps its files) so that the verifier runs and grades what the agent left.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import type { TrialResult } from '../../src/results/trial-result';
import type { CliRun } from '../support/cli';
import { runCli, workspace } from '../support/cli';
import { containersOfJob, removeJobLeftovers } from '../support/docker';
import { testTemporal } from '../support/temporal';

const jobName = `fork-bomb-${randomBytes(3).toString('hex')}`;
let dir: string;
let run: CliRun;

const trialDir = (agent: string) => path.join(dir, 'jobs', jobName, `bombed__${agent}__1`);
const trial = async (agent: string) =>
  JSON.parse(await readFile(path.join(trialDir(agent), 'result.json'), 'utf8')) as TrialResult;

/** A reward only the verifier gives, and only for what the agent wrote before its bomb. */
const TEST_SH = `#!/bin/bash
if grep -q built /app/answer.txt; then echo 0.75 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
`;

const AGENTS: Record<string, string> = {
  // The bomb outlives the agent's step, which ends at once: the verifier's first exec (which would kill it) cannot start.
  'leaves-a-bomb': `echo built > /app/answer.txt
setsid bash -c ':(){ :|:& };:' >/dev/null 2>&1 &
exit 0`,
  // The agent's step itself runs on (a loop of builtins, no fork) until its timeout, whose kill of all cannot start.
  'bombs-and-stalls': `echo built > /app/answer.txt
:(){ :|:& };:
while :; do :; done`,
};

describe('an agent that runs a fork bomb', () => {
  before(async () => {
    const { connection } = await testTemporal(); // the tests' Temporal server, started if needed
    await connection.close();
    dir = await workspace();
    const task = path.join(dir, 'tasks', 'bombed');
    await mkdir(path.join(task, 'tests'), { recursive: true });
    await mkdir(path.join(task, 'environment'), { recursive: true });
    await writeFile(
      path.join(task, 'task.toml'),
      'version = "1.0"\n[agent]\ntimeout_sec = 15\n[verifier]\ntimeout_sec = 30\n[environment]\npids_limit = 40\n'
    );
    await writeFile(path.join(task, 'environment', 'Dockerfile'), 'FROM debian:bookworm-slim\nWORKDIR /app\n');
    await writeFile(path.join(task, 'instruction.md'), 'Write "built" to /app/answer.txt.');
    await writeFile(path.join(task, 'tests', 'test.sh'), TEST_SH);
    const agents = Object.entries(AGENTS).flatMap(([name, script]) => [
      `  - name: ${name}`,
      '    execute: |',
      ...script.split('\n').map((line) => `      ${line}`),
    ]);
    await writeFile(
      path.join(dir, 'job.yaml'),
      [
        `name: ${jobName}`,
        'n_concurrent_trials: 2',
        'environment:',
        '  type: docker',
        '  override_cpus: 0.5',
        'agents:',
        ...agents,
        'datasets:',
        '  - path: tasks',
        '',
      ].join('\n')
    );
    run = await runCli(['job.yaml'], { cwd: dir, timeoutMs: 10 * 60_000 });
  });
  after(() => removeJobLeftovers(jobName));

  it('completes the job', () => {
    assert.equal(run.code, 0, run.stderr);
  });

  for (const agent of Object.keys(AGENTS)) {
    it(`${agent}: every agent process is killed, and the verifier runs and grades what the agent left`, async () => {
      const result = await trial(agent);
      // The stalling agent's own step times out (its error, recorded), and the verifier grades it all the same.
      assert.equal(result.error?.type ?? null, agent === 'bombs-and-stalls' ? 'AgentTimeoutError' : null);
      assert.equal(result.restarts, 0);
      assert.deepEqual(result.rewards, { reward: 0.75 }, "the verifier's reward, for the file the agent wrote");
      const log = await readFile(path.join(trialDir(agent), 'trial.log'), 'utf8');
      assert.match(log, /tests\/test\.sh exit 0/, log);
    });
  }

  it('leaves no containers behind', async () => {
    assert.deepEqual(await containersOfJob(jobName), []);
  });
});
