/**
 * The `rollout` image (root Dockerfile, scripts/build-image.sh), built for real, offline, from the local base image
 * with `npm ci`: it runs the CLI as a non-root user, and its worker checks the Temporal configuration before anything
 * starts (one line, exit 3). The image is removed afterwards.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';

import { REPO_ROOT } from './support/temporal';

const run = promisify(execFile);
const TAG = `rollout:test-${process.env.ROLLOUT_TEST_TEMPORAL_PORT ?? 17233}`;
let built: string;

async function docker(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return run('docker', args, { timeout: 120_000 }).then(
    ({ stdout, stderr }) => ({ code: 0, stdout, stderr }),
    (err: { code?: number; stdout?: string; stderr?: string }) => ({
      code: typeof err.code === 'number' ? err.code : -1,
      stdout: err.stdout ?? '',
      stderr: err.stderr ?? '',
    })
  );
}

describe('the rollout image', () => {
  before(async () => {
    const { stdout } = await run('bash', [path.join(REPO_ROOT, 'scripts', 'build-image.sh'), TAG], {
      timeout: 30 * 60_000,
    });
    built = stdout;
  });
  after(() => docker('image', 'rm', '-f', TAG));

  it('builds and says its size and build time', () => {
    assert.match(built, new RegExp(`${TAG}: \\d+ MB in \\d+ s`));
  });

  it('runs the CLI as a non-root user', async () => {
    const help = await docker('run', '--rm', TAG, '--help');
    assert.equal(help.code, 0, help.stderr);
    for (const command of ['worker', 'codec-server', 'view']) assert.match(help.stdout, new RegExp(`\\b${command}\\b`));
    const id = await docker('run', '--rm', '--entrypoint', 'id', TAG, '-u');
    assert.equal(id.stdout.trim(), '10001');
  });

  it('runs `rollout worker` by default, refusing a bad Temporal configuration in one line, exit 3', async () => {
    const worker = await docker(
      'run',
      '--rm',
      '-e',
      'TEMPORAL_ADDRESS=temporal.invalid:7233',
      '-e',
      'TEMPORAL_TLS_SERVER_CA_CERT_PATH=/nowhere/ca.pem',
      TAG
    );
    assert.equal(worker.code, 3, worker.stderr);
    assert.deepEqual(worker.stderr.trim().split('\n'), [
      'error: Temporal TLS server ca cert /nowhere/ca.pem (TEMPORAL_TLS_SERVER_CA_CERT_PATH): no such file',
    ]);
  });
});
