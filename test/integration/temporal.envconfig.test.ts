/**
 * Temporal connections through Temporal's environment configuration (TEMPORAL_* variables, temporal.toml profiles),
 * as the `temporal` CLI reads them; a bad setting is one line naming it and where it was given, exit 3, before
 * anything starts, with no secret in it. The TLS server itself is tested on the cluster (e2e.temporal-tls).
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { before, describe, it } from 'node:test';

import { loadTemporalProfile } from '../../src/temporal/envconfig';
import { runCli } from '../support/cli';
import { startTestServer, TEST_ADDRESS } from '../support/temporal';

let dir: string;
const SECRET = 'sk-test-never-printed-1234';

/** A self-signed certificate and its key (openssl), the way a team's PKI hands them out. */
function makeCert(name: string): { cert: string; key: string } {
  const cert = path.join(dir, `${name}.crt`);
  const key = path.join(dir, `${name}.key`);
  const args = ['-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', key, '-out', cert, '-subj', `/CN=${name}`];
  execFileSync('openssl', ['req', ...args], { stdio: 'ignore' });
  return { cert, key };
}

/** Only the variables a test sets: the host's own TEMPORAL_* and config file stay out. */
function env(vars: Record<string, string>): NodeJS.ProcessEnv {
  return { HOME: dir, ...vars };
}

before(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'rollout-envconfig-'));
  await writeFile(path.join(dir, 'not.pem'), 'hello');
});

describe('Temporal environment configuration', () => {
  it('reads the profile TEMPORAL_PROFILE names from temporal.toml, with the environment overriding it', async () => {
    const { cert, key } = makeCert('client');
    const file = path.join(dir, 'temporal.toml');
    await writeFile(
      file,
      [
        '[profile.default]',
        'address = "localhost:7233"',
        '[profile.prod]',
        'address = "prod.tmprl.cloud:7233"',
        'namespace = "evals.acct"',
        '[profile.prod.tls]',
        `client_cert_path = "${cert}"`,
        `client_key_path = "${key}"`,
        '',
      ].join('\n')
    );
    const prod = loadTemporalProfile(env({ TEMPORAL_CONFIG_FILE: file, TEMPORAL_PROFILE: 'prod' }));
    assert.equal(prod.address, 'prod.tmprl.cloud:7233');
    assert.equal(prod.namespace, 'evals.acct');
    const tls = prod.connection.tls;
    assert.ok(tls && typeof tls === 'object' && tls.clientCertPair, 'client certificate pair loaded');
    assert.match(prod.where('tls.client_cert'), /tls\.client_cert of profile "prod" in .*temporal\.toml/);

    const overridden = loadTemporalProfile(
      env({
        TEMPORAL_CONFIG_FILE: file,
        TEMPORAL_PROFILE: 'prod',
        TEMPORAL_NAMESPACE: 'other',
        TEMPORAL_API_KEY: SECRET,
      })
    );
    assert.equal(overridden.namespace, 'other');
    assert.equal(overridden.connection.apiKey, SECRET);
    assert.equal(overridden.where('namespace'), 'TEMPORAL_NAMESPACE');

    // The default file place (~/.config/temporalio/temporal.toml) and the default profile.
    const home = loadTemporalProfile(env({}));
    assert.equal(home.address, undefined, 'no file, no variable: no server named (the dev server is used)');
    // An API key alone turns TLS on, as Temporal's SDKs and CLI do.
    assert.equal(loadTemporalProfile(env({ TEMPORAL_API_KEY: SECRET })).connection.tls, true);
  });

  it('names a missing or bad certificate, a half pair and an unknown profile, without secrets', () => {
    const { cert } = makeCert('half');
    const notPem = path.join(dir, 'not.pem');
    const cases: [Record<string, string>, RegExp][] = [
      [
        { TEMPORAL_TLS_CLIENT_CERT_PATH: path.join(dir, 'gone.crt'), TEMPORAL_TLS_CLIENT_KEY_PATH: notPem },
        /client cert .*gone\.crt \(TEMPORAL_TLS_CLIENT_CERT_PATH\): no such file/,
      ],
      [
        { TEMPORAL_TLS_SERVER_CA_CERT_PATH: notPem },
        /server ca cert .*not\.pem \(TEMPORAL_TLS_SERVER_CA_CERT_PATH\): not a PEM certificate/,
      ],
      [{ TEMPORAL_TLS_CLIENT_CERT_PATH: cert }, /TEMPORAL_TLS_CLIENT_CERT_PATH is set but the client key is not/],
      [
        { TEMPORAL_TLS_CLIENT_CERT_PATH: cert, TEMPORAL_TLS_CLIENT_KEY_DATA: SECRET },
        /client key \(TEMPORAL_TLS_CLIENT_KEY_DATA\): not a PEM private key/,
      ],
      [{ TEMPORAL_PROFILE: 'staging' }, /profile "staging" \(TEMPORAL_PROFILE\) is not in .*temporal\.toml/],
    ];
    for (const [vars, pattern] of cases) {
      assert.throws(
        () => loadTemporalProfile(env({ TEMPORAL_API_KEY: SECRET, ...vars })),
        (err: Error) => {
          assert.equal(err.name, 'TemporalConfigError');
          assert.match(err.message, pattern);
          assert.doesNotMatch(err.message, new RegExp(SECRET));
          assert.equal(err.message.split('\n').length, 1);
          return true;
        }
      );
    }
  });

  it('the CLI: a bad certificate, a wrong namespace, an unreachable TLS server: one line, exit 3', async () => {
    await startTestServer();
    const notPem = path.join(dir, 'not.pem');
    const runs: [string[], Record<string, string>, RegExp][] = [
      [
        ['worker'],
        { TEMPORAL_TLS_CLIENT_CERT_PATH: notPem, TEMPORAL_TLS_CLIENT_KEY_PATH: notPem },
        /not a PEM certificate/,
      ],
      [
        ['jobs'],
        { TEMPORAL_NAMESPACE: 'no-such-namespace' },
        /namespace "no-such-namespace" \(TEMPORAL_NAMESPACE\) does not exist/,
      ],
      // TLS to a plaintext server: the handshake fails, said with where TLS came from. By name: TLS to an IP
      // address makes Node warn (RFC 6066 forbids an IP as the server name).
      [
        ['jobs'],
        { TEMPORAL_ADDRESS: TEST_ADDRESS.replace('127.0.0.1', 'localhost'), TEMPORAL_API_KEY: SECRET },
        /Temporal unreachable at .* \(TEMPORAL_ADDRESS, TLS\)/,
      ],
    ];
    for (const [args, vars, pattern] of runs) {
      const run = await runCli(args, { cwd: dir, env: { TEMPORAL_ADDRESS: TEST_ADDRESS, ...vars }, timeoutMs: 60_000 });
      assert.equal(run.code, 3, `rollout ${args.join(' ')}: exit code; stderr: ${run.stderr}`);
      const lines = run.stderr.trim().split('\n');
      assert.equal(lines.length, 1, `one line: ${run.stderr}`);
      assert.match(lines[0]!, pattern);
      assert.doesNotMatch(run.stderr + run.stdout, new RegExp(SECRET));
    }
  });
});
