/**
 * Harbor task features real benchmarks use, each a task built the way Harbor's example tasks are, run with the
 * oracle through the CLI on the real Docker engine: a BuildKit-only Dockerfile (COPY --chmod, RUN --mount=type=cache)
 * and an image ENTRYPOINT that must run (it writes a file the verifier checks).
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import type { TrialResult } from '../../src/results/trial-result';
import type { CliRun } from '../support/cli';
import { runCli, writeOracleJob } from '../support/cli';
import { containersOfJob, imagesOfJob, removeJobLeftovers } from '../support/docker';
import { testTemporal } from '../support/temporal';

const jobName = `harbor-features-${randomBytes(3).toString('hex')}`;
let dir: string;
let run: CliRun;

/** A task whose verifier writes 1 when `check` (bash) succeeds in the container, else 0. */
async function writeTask(name: string, files: Record<string, string>, check: string): Promise<void> {
  const task = path.join(dir, 'tasks', name);
  const all: Record<string, string> = {
    'task.toml': '[agent]\ntimeout_sec = 60.0\n[verifier]\ntimeout_sec = 60.0\n',
    'instruction.md': `Nothing to do: the environment itself is under test (${name}).`,
    'solution/solve.sh': 'true\n',
    'tests/test.sh': `if ${check}; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n`,
    ...files,
  };
  for (const [file, content] of Object.entries(all)) {
    await mkdir(path.dirname(path.join(task, file)), { recursive: true });
    await writeFile(path.join(task, file), content);
  }
}

const trial = async (task: string) =>
  JSON.parse(
    await readFile(path.join(dir, 'jobs', jobName, `${task}__oracle__1`, 'result.json'), 'utf8')
  ) as TrialResult;

describe('Harbor task features on Docker', () => {
  before(async () => {
    await testTemporal().then(({ connection }) => connection.close());
    dir = await mkdtemp(path.join(tmpdir(), 'rollout-harbor-'));
    await writeTask(
      'buildkit-only',
      {
        'environment/Dockerfile': [
          'FROM debian:bookworm-slim',
          'COPY --chmod=755 hello.sh /usr/local/bin/hello',
          'RUN --mount=type=cache,target=/var/cache/rollout-test echo cached > /var/cache/rollout-test/x && cp /var/cache/rollout-test/x /built-with-cache',
          '',
        ].join('\n'),
        'environment/hello.sh': '#!/bin/sh\necho hi\n',
      },
      '[ "$(/usr/local/bin/hello)" = hi ] && [ "$(cat /built-with-cache)" = cached ]'
    );
    await writeTask(
      'image-entrypoint',
      {
        'environment/Dockerfile': [
          'FROM debian:bookworm-slim',
          'COPY --chmod=755 entrypoint.sh /entrypoint.sh',
          'ENTRYPOINT ["/entrypoint.sh"]',
          '',
        ].join('\n'),
        'environment/entrypoint.sh': '#!/bin/sh\necho started > /tmp/entrypoint-ran\nexec "$@"\n',
      },
      '[ "$(cat /tmp/entrypoint-ran)" = started ]'
    );
    await writeOracleJob(dir, { name: jobName, n_concurrent_trials: 2 });
    run = await runCli(['job.yaml'], { cwd: dir });
  });
  after(() => removeJobLeftovers(jobName));

  it('completes the job', () => {
    assert.equal(run.code, 0, run.stderr);
  });

  it('builds a BuildKit-only Dockerfile (COPY --chmod, RUN --mount=type=cache) with BuildKit', async () => {
    const result = await trial('buildkit-only');
    assert.equal(result.error, null, JSON.stringify(result.error));
    assert.deepEqual(result.rewards, { reward: 1 });
  });

  it("runs the image's ENTRYPOINT, overriding only the command that keeps the container alive", async () => {
    const result = await trial('image-entrypoint');
    assert.equal(result.error, null, JSON.stringify(result.error));
    assert.deepEqual(result.rewards, { reward: 1 });
  });

  it('leaves no container or image of the job behind (delete: true)', async () => {
    assert.deepEqual(await containersOfJob(jobName), []);
    assert.deepEqual(await imagesOfJob(jobName), []);
  });
});
