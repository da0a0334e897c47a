/**
 * The embedded default: with no TEMPORAL_ADDRESS, `rollout job.yaml` starts a local Temporal dev server (SQLite in
 * the state folder) that outlives the command; `rollout server start|stop|status` manages it.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, describe, it } from 'node:test';

import { runCli } from '../support/cli';
import { writeLocalJob } from '../support/local-job';

const port = 17000 + Math.floor(Math.random() * 400);
let stateDir: string;
const env = () => ({ TEMPORAL_ADDRESS: '', ROLLOUT_TEMPORAL_PORT: String(port), ROLLOUT_STATE_DIR: stateDir });

describe('the local dev server', () => {
  after(async () => {
    await runCli(['server', 'stop'], { cwd: tmpdir(), env: env() });
  });

  it('is started by a job when none runs, keeps running after it, and stops on request', async () => {
    stateDir = await mkdtemp(path.join(tmpdir(), 'rollout-state-'));
    const cwd = tmpdir();
    const before = await runCli(['server', 'status'], { cwd, env: env() });
    assert.equal(before.code, 1);
    assert.match(before.stdout, /^stopped/);

    const jobFile = await writeLocalJob({
      name: `embedded-${randomBytes(3).toString('hex')}`,
      attempts: 2,
      concurrency: 2,
    });
    const run = await runCli([jobFile], { cwd, env: env() });
    assert.equal(run.code, 0, run.stderr);
    assert.match(
      run.stdout,
      new RegExp(`Temporal UI: http://127\\.0\\.0\\.1:${port + 1000}/namespaces/default/workflows/`)
    );
    assert.ok(existsSync(path.join(stateDir, 'temporal.db')), 'SQLite persistence in the state folder');

    const running = await runCli(['server', 'status'], { cwd, env: env() });
    assert.equal(running.code, 0);
    assert.match(running.stdout, new RegExp(`^running · 127\\.0\\.0\\.1:${port}`));

    const stop = await runCli(['server', 'stop'], { cwd, env: env() });
    assert.match(stop.stdout, /stopped/);
    assert.equal((await runCli(['server', 'status'], { cwd, env: env() })).code, 1);

    const start = await runCli(['server', 'start'], { cwd, env: env() });
    assert.equal(start.code, 0, start.stderr);
    assert.match(start.stdout, new RegExp(`Temporal dev server at 127\\.0\\.0\\.1:${port}`));
  });

  it('fails with one clear line when TEMPORAL_ADDRESS points nowhere', async () => {
    const jobFile = await writeLocalJob({ name: 'unreachable', attempts: 1, concurrency: 1 });
    const run = await runCli([jobFile], { cwd: tmpdir(), env: { TEMPORAL_ADDRESS: '127.0.0.1:1' } });
    assert.equal(run.code, 3);
    assert.match(run.stderr, /^error: Temporal unreachable at 127\.0\.0\.1:1 \(TEMPORAL_ADDRESS\): /m);
  });
});
