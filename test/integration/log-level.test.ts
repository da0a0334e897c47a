/**
 * `log_level` acts: Rollout's CLI messages and the Trial workflow's `log` lines appear at and above the job's level,
 * through the real CLI, its in-process worker and the tests' Temporal server (local environment: no containers).
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { appendFile } from 'node:fs/promises';
import path from 'node:path';
import { before, describe, it } from 'node:test';

import { runCli } from '../support/cli';
import { writeLocalJob } from '../support/local-job';
import { testTemporal } from '../support/temporal';

async function runAtLevel(level: string): Promise<{ stderr: string; jobName: string }> {
  const jobName = `log-${level}-${randomBytes(3).toString('hex')}`;
  const jobFile = await writeLocalJob({ name: jobName, attempts: 1, concurrency: 1 });
  await appendFile(jobFile, `log_level: ${level}\n`);
  const run = await runCli([path.basename(jobFile)], { cwd: path.dirname(jobFile), timeoutMs: 180_000 });
  assert.equal(run.code, 0, run.stderr);
  return { stderr: run.stderr, jobName };
}

describe('log_level', () => {
  before(async () => {
    const { connection } = await testTemporal();
    await connection.close();
  });

  it('debug shows the CLI messages and the workflow log at every level', async () => {
    const { stderr, jobName } = await runAtLevel('debug');
    assert.match(stderr, new RegExp(`job ${jobName}: 1 trials`));
    assert.match(stderr, /debug: trial trivial__echo__1: execute on /);
    assert.match(stderr, /info: trial trivial__echo__1: completed, rewards \{"reward":1\}/);
  });

  it('info shows the CLI messages and the workflow info lines, not its debug lines', async () => {
    const { stderr, jobName } = await runAtLevel('info');
    assert.match(stderr, new RegExp(`job ${jobName}: 1 trials`));
    assert.match(stderr, /info: trial trivial__echo__1: completed/);
    assert.doesNotMatch(stderr, /debug: /);
  });

  it('error hides the CLI messages and the workflow log', async () => {
    const { stderr, jobName } = await runAtLevel('error');
    assert.doesNotMatch(stderr, new RegExp(`job ${jobName}: 1 trials`));
    assert.doesNotMatch(stderr, /trial trivial__echo__1: /);
  });
});
