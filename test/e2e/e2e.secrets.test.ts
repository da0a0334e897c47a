/**
 * A `${VAR}` in agent env is resolved on the worker only: the value reaches the agent, but never Temporal history,
 * logs, the CLI's output or result files (an agent printing it to its own log is redacted on collect).
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readFile, readdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import type { Client, Connection } from '@temporalio/client';

import type { CliRun } from '../support/cli';
import { runCli, workspace } from '../support/cli';
import { removeJobLeftovers } from '../support/docker';
import { testTemporal } from '../support/temporal';

const jobName = `secrets-${randomBytes(3).toString('hex')}`;
const SECRET = `sk-test-${randomBytes(12).toString('hex')}`;
let dir: string;
let run: CliRun;
let client: Client;
let connection: Connection;

async function allFiles(root: string): Promise<string[]> {
  const entries = await readdir(root, { withFileTypes: true, recursive: true });
  return entries.filter((e) => e.isFile()).map((e) => path.join(e.parentPath, e.name));
}

describe('secrets', () => {
  before(async () => {
    ({ client, connection } = await testTemporal());
    dir = await workspace({ 'tasks/hello-world': 'examples/tasks/hello-world' });
    await writeFile(
      path.join(dir, 'job.yaml'),
      [
        `name: ${jobName}`,
        'agents:',
        '  - name: leaky',
        '    execute: |',
        '      echo "my key is $API_KEY"',
        '      echo "$API_KEY" > /logs/agent/leak.txt',
        '      [ -n "$API_KEY" ] && echo "Hello, world!" > hello.txt',
        '    env:',
        '      API_KEY: ${ROLLOUT_TEST_SECRET}',
        'datasets:',
        '  - path: tasks',
        '',
      ].join('\n')
    );
    run = await runCli(['job.yaml'], { cwd: dir, env: { ROLLOUT_TEST_SECRET: SECRET } });
  });
  after(async () => {
    await connection.close();
    await removeJobLeftovers(jobName);
  });

  it('hands the resolved value to the agent', async () => {
    assert.equal(run.code, 0, run.stderr);
    const result = JSON.parse(
      await readFile(path.join(dir, 'jobs', jobName, 'hello-world__leaky__1', 'result.json'), 'utf8')
    ) as { rewards: unknown };
    assert.deepEqual(result.rewards, { reward: 1 });
    const log = await readFile(
      path.join(dir, 'jobs', jobName, 'hello-world__leaky__1', 'agent', 'execute.txt'),
      'utf8'
    );
    assert.match(log, /my key is \[REDACTED\]/);
  });

  it('keeps the value out of every file the job wrote and out of the CLI output', async () => {
    const files = await allFiles(path.join(dir, 'jobs', jobName));
    assert.ok(files.length >= 5, files.join());
    for (const file of files) assert.ok(!(await readFile(file, 'latin1')).includes(SECRET), `secret found in ${file}`);
    assert.ok(!run.stdout.includes(SECRET) && !run.stderr.includes(SECRET));
    const config = await readFile(path.join(dir, 'jobs', jobName, 'config.json'), 'utf8');
    assert.match(config, /\$\{ROLLOUT_TEST_SECRET\}/);
  });

  it('keeps the value out of the Job and Trial workflow histories', async () => {
    for (const workflowId of [`rollout-job/${jobName}`, `${jobName}/hello-world__leaky__1`]) {
      const history = await client.workflow.getHandle(workflowId).fetchHistory();
      const text = JSON.stringify(history, (_key, value: unknown) =>
        value instanceof Uint8Array ? Buffer.from(value).toString('latin1') : value
      );
      assert.ok(text.length > 1000, `history of ${workflowId} fetched`);
      assert.ok(!text.includes(SECRET), `secret in history of ${workflowId}`);
    }
  });
});
