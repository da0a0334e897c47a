/**
 * A secured Temporal, for real: the production server of scripts/temporal-cluster.sh with mTLS on its frontend
 * (`up --tls`) and with Temporal's JWT authorizer (`up --auth`). The examples job runs through each with the
 * TEMPORAL_* lines the script prints; without the client certificate, or with a token the server did not sign, the
 * CLI is refused with one line naming the setting, exit 3, and prints no secret. Cluster only (`npm run
 * test:cluster`): one server start per mode, then back to the plain server the other cluster tests use.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import { parse, stringify } from 'yaml';

import { runCli, workspace } from '../support/cli';
import { removeJobLeftovers } from '../support/docker';
import { TEST_SERVER_KIND, testCluster } from '../support/temporal';

const onCluster = TEST_SERVER_KIND === 'cluster';
const suffix = randomBytes(3).toString('hex');

/** The `KEY=value` lines `temporal-cluster.sh up` prints, as an environment. */
function exported(stdout: string): Record<string, string> {
  return Object.fromEntries(
    stdout
      .split('\n')
      .filter((line) => /^TEMPORAL_\w+=/.test(line))
      .map((line) => [line.slice(0, line.indexOf('=')), line.slice(line.indexOf('=') + 1)])
  );
}

/** A workspace with the examples job under its own name. */
async function examplesJob(name: string): Promise<string> {
  const dir = await workspace({ examples: 'examples' });
  const file = path.join(dir, 'examples', 'job.yaml');
  const job = parse(await readFile(file, 'utf8')) as Record<string, unknown>;
  await writeFile(file, stringify({ ...job, name }));
  return dir;
}

/** A self-signed certificate and its key in dir, made by openssl: a CA or a client this server never trusted. */
function selfSignedCertificate(dir: string, commonName: string, keyFile: string, certFile: string): void {
  const args = ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', '-subj', `/CN=${commonName}`];
  const made = spawnSync('openssl', [...args, '-keyout', keyFile, '-out', certFile], { cwd: dir, encoding: 'utf8' });
  assert.equal(made.status, 0, made.stderr);
}

/** stderr without Node's own warnings (not Rollout's output). */
function rolloutLines(stderr: string): string[] {
  return stderr.split('\n').filter((line) => line.trim() && !/^\(node:\d+\)|^\(Use `node --trace/.test(line));
}

function assertSixTrials(run: { code: number | null; stdout: string; stderr: string }): void {
  assert.equal(run.code, 0, run.stderr);
  assert.match(run.stdout, /trials: 6 total, 6 completed, 0 errored, 0 infrastructure errors/);
}

describe('Temporal with mTLS (temporal-cluster.sh up --tls)', { skip: !onCluster && 'cluster only' }, () => {
  const jobName = `tls-${suffix}`;
  let env: Record<string, string>;
  before(async () => {
    env = exported(await testCluster('up', '--tls'));
  });
  after(() => removeJobLeftovers(jobName));

  it('prints the TEMPORAL_* lines: the CA, the client certificate and key, the server name', () => {
    for (const key of [
      'TEMPORAL_ADDRESS',
      'TEMPORAL_TLS_SERVER_CA_CERT_PATH',
      'TEMPORAL_TLS_CLIENT_CERT_PATH',
      'TEMPORAL_TLS_CLIENT_KEY_PATH',
      'TEMPORAL_TLS_SERVER_NAME',
    ])
      assert.ok(env[key], `${key} in ${JSON.stringify(env)}`);
  });

  it('runs the examples job with them', async () => {
    assertSixTrials(await runCli(['examples/job.yaml'], { cwd: await examplesJob(jobName), env }));
  });

  it('refuses the CLI without the client certificate: one line naming the setting, exit 3', async () => {
    const noCert = { ...env };
    delete noCert.TEMPORAL_TLS_CLIENT_CERT_PATH;
    delete noCert.TEMPORAL_TLS_CLIENT_KEY_PATH;
    const run = await runCli(['examples/job.yaml'], { cwd: await examplesJob(`${jobName}-nocert`), env: noCert });
    assert.equal(run.code, 3, run.stderr);
    const lines = rolloutLines(run.stderr);
    assert.equal(lines.length, 1, run.stderr);
    // The TLS preflight names the missing setting (not the SDK's "Failed to connect before the deadline").
    assert.match(
      lines[0]!,
      /requires a client certificate: set TEMPORAL_TLS_CLIENT_CERT_PATH and TEMPORAL_TLS_CLIENT_KEY_PATH/
    );
    assert.ok(lines[0]!.includes(env.TEMPORAL_ADDRESS!), lines[0]);
    assert.doesNotMatch(run.stderr, /deadline/);
  });

  it('refuses a client certificate another CA signed: one line naming TEMPORAL_TLS_CLIENT_CERT_PATH, exit 3', async () => {
    const dir = await examplesJob(`${jobName}-othercert`);
    selfSignedCertificate(dir, 'intruder', 'other.key', 'other.crt');
    const run = await runCli(['examples/job.yaml'], {
      cwd: dir,
      env: {
        ...env,
        TEMPORAL_TLS_CLIENT_CERT_PATH: path.join(dir, 'other.crt'),
        TEMPORAL_TLS_CLIENT_KEY_PATH: path.join(dir, 'other.key'),
      },
    });
    assert.equal(run.code, 3, run.stderr);
    const lines = rolloutLines(run.stderr);
    assert.equal(lines.length, 1, run.stderr);
    assert.match(lines[0]!, /refused the client certificate of TEMPORAL_TLS_CLIENT_CERT_PATH \(unknown ca\)/);
  });

  it('refuses a server certificate the configured CA did not sign: one line naming the CA setting, exit 3', async () => {
    const dir = await examplesJob(`${jobName}-otherca`);
    selfSignedCertificate(dir, 'other-ca', 'ca.key', 'ca.crt');
    const run = await runCli(['examples/job.yaml'], {
      cwd: dir,
      env: { ...env, TEMPORAL_TLS_SERVER_CA_CERT_PATH: path.join(dir, 'ca.crt') },
    });
    assert.equal(run.code, 3, run.stderr);
    const lines = rolloutLines(run.stderr);
    assert.equal(lines.length, 1, run.stderr);
    assert.match(lines[0]!, /TLS certificate is not signed by the CA of TEMPORAL_TLS_SERVER_CA_CERT_PATH/);
  });
});

describe(
  'Temporal with its JWT authorizer (temporal-cluster.sh up --auth)',
  { skip: !onCluster && 'cluster only' },
  () => {
    const jobName = `auth-${suffix}`;
    let env: Record<string, string>;
    before(async () => {
      env = exported(await testCluster('up', '--auth'));
    });
    after(async () => {
      await removeJobLeftovers(jobName);
      await testCluster('up'); // the plain server the other cluster tests expect
    });

    it('prints a token to use as TEMPORAL_API_KEY, and the CA', () => {
      assert.match(env.TEMPORAL_API_KEY ?? '', /^[\w-]+\.[\w-]+\.[\w-]+$/);
      assert.ok(env.TEMPORAL_TLS_SERVER_CA_CERT_PATH);
    });

    it('runs the examples job with the token', async () => {
      assertSixTrials(await runCli(['examples/job.yaml'], { cwd: await examplesJob(jobName), env }));
    });

    it('refuses a token the server did not sign: one line naming TEMPORAL_API_KEY, exit 3, no secret', async () => {
      const [header, , signature] = env.TEMPORAL_API_KEY!.split('.');
      const claims = Buffer.from(JSON.stringify({ sub: 'intruder', permissions: ['temporal-system:admin'] }));
      const forged = `${header}.${claims.toString('base64url')}.${signature}`;
      const run = await runCli(['examples/job.yaml'], {
        cwd: await examplesJob(`${jobName}-forged`),
        env: { ...env, TEMPORAL_API_KEY: forged },
      });
      assert.equal(run.code, 3, run.stderr);
      const lines = rolloutLines(run.stderr);
      assert.equal(lines.length, 1, run.stderr);
      assert.match(lines[0]!, /refused the API key \(TEMPORAL_API_KEY\)/);
      assert.ok(!`${run.stdout}${run.stderr}`.includes(signature!), 'the token is not printed');
    });

    it('refuses the CLI without a token: one line, exit 3', async () => {
      const noKey = { ...env };
      delete noKey.TEMPORAL_API_KEY;
      const run = await runCli(['examples/job.yaml'], { cwd: await examplesJob(`${jobName}-nokey`), env: noKey });
      assert.equal(run.code, 3, run.stderr);
      const lines = rolloutLines(run.stderr);
      assert.equal(lines.length, 1, run.stderr);
      assert.match(lines[0]!, /refused no API key for namespace "default"/);
    });
  }
);
