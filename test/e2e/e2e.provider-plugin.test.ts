/**
 * A provider from outside the repository, end to end through the CLI: test/fixtures/providers/docker-cli-sandbox
 * (written only against the documented contract, docs/providers.md) loaded with `environment: { type, import }` runs
 * the examples job's tasks and agents with the rewards they get on docker; its settings are validated by it, and a
 * module that cannot be loaded is one input error naming environment.import.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import type { TrialResult } from '../../src/results/trial-result';
import type { CliRun } from '../support/cli';
import { runCli, workspace } from '../support/cli';
import { testTemporal } from '../support/temporal';

const jobName = `plugin-${randomBytes(3).toString('hex')}`;
/** The compiled fixture (under dist/test/fixtures). */
const PROVIDER = path.join(__dirname, '..', 'fixtures', 'providers', 'docker-cli-sandbox', 'index.js');
let dir: string;
let run: CliRun;

const trial = async (name: string) =>
  JSON.parse(await readFile(path.join(dir, 'jobs', jobName, name, 'result.json'), 'utf8')) as TrialResult;

/** examples/job.yaml with its environment replaced by the imported provider's. */
async function jobWith(environment: string[], name = jobName): Promise<void> {
  const example = await readFile(path.join(dir, 'examples', 'job.yaml'), 'utf8');
  const [head, rest] = example.split(/^environment:\n(?: {2}.*\n)+/m);
  assert.ok(rest !== undefined, 'examples/job.yaml has an environment section');
  await writeFile(
    path.join(dir, 'examples', 'job.yaml'),
    `${head!.replace(/^name: .*$/m, `name: ${name}`)}environment:\n${environment.map((l) => `  ${l}\n`).join('')}${rest}`
  );
}

/** Containers the fixture provider labelled for this test's job (other runs may share the Docker host). */
function fixtureContainers(): string[] {
  const format = '{{.ID}} {{.Label "rollout-fixture.trial"}}';
  const out = execFileSync('docker', ['ps', '-a', '--filter', 'label=rollout-fixture.trial', '--format', format], {
    encoding: 'utf8',
  });
  return out
    .split('\n')
    .map((line) => line.split(' '))
    .filter(([, trialId]) => trialId?.startsWith(`${jobName}/`))
    .map(([id]) => id!);
}

describe('a provider from outside the repository (environment.import)', () => {
  before(async () => {
    const { connection } = await testTemporal(); // the tests' Temporal server, started if needed
    await connection.close();
    dir = await workspace({ examples: 'examples' });
    await jobWith(['type: docker-cli-sandbox', `import: ${PROVIDER}`, 'network: bridge']);
    run = await runCli(['examples/job.yaml'], { cwd: dir, timeoutMs: 10 * 60_000 });
  });
  after(() => {
    const left = fixtureContainers();
    if (left.length) execFileSync('docker', ['rm', '-f', ...left]);
  });

  it('runs the examples job through it: exit 0, the rewards as on docker', async () => {
    assert.equal(run.code, 0, run.stderr);
    const oracle = await trial('hello-world__oracle__1');
    assert.deepEqual(oracle.rewards, { reward: 1 });
    assert.equal(oracle.environment_type, 'docker-cli-sandbox');
    assert.deepEqual((await trial('impossible__oracle__1')).rewards, { reward: 0 });
    assert.deepEqual((await trial('hello-world__greeter__1')).rewards, { reward: 1 });
    assert.deepEqual((await trial('word-count__greeter__1')).rewards, { lines: 0, words: 0 });
  });

  it("removes its trials' containers (through its own removeTrial)", () => {
    assert.deepEqual(fixtureContainers(), []);
  });

  it('validates its settings with its own schema: a bad value is one input error naming the key', async () => {
    await jobWith(['type: docker-cli-sandbox', `import: ${PROVIDER}`, 'network: wifi'], `${jobName}-bad`);
    const bad = await runCli(['examples/job.yaml'], { cwd: dir, timeoutMs: 60_000 });
    assert.equal(bad.code, 2, bad.stderr);
    assert.match(bad.stderr, /^error: .*job\.yaml: environment\.network: /m);
  });

  it('a module that cannot be loaded is one input error naming environment.import', async () => {
    await jobWith(['type: docker-cli-sandbox', 'import: ./no-such-provider.js'], `${jobName}-missing`);
    const missing = await runCli(['examples/job.yaml'], { cwd: dir, timeoutMs: 60_000 });
    assert.equal(missing.code, 2, missing.stderr);
    assert.match(missing.stderr, /^error: .*job\.yaml: environment\.import: cannot load the provider module/m);
  });
});
