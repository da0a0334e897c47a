/**
 * examples/prompt-optimisation.ts, run as a user would (its compiled script, `import { Rollout } from 'rollout-agents'`),
 * on real Docker trials: the loop must keep the edits that raise the reward and drop the one that does not.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { promisify } from 'node:util';
import { after, describe, it } from 'node:test';

import { cliEnv, workspace } from '../support/cli';
import { removeJobLeftovers } from '../support/docker';
import { REPO_ROOT, testTemporal } from '../support/temporal';

const run = `prompt-opt-${randomBytes(3).toString('hex')}`;

describe('examples/prompt-optimisation.ts', () => {
  after(async () => {
    for (let round = 0; round <= 4; round++) await removeJobLeftovers(`${run}-round-${round}`);
  });

  it('improves the prompt round by round from the rewards, and ends with every solvable task solved', async () => {
    const { connection } = await testTemporal();
    await connection.close();
    const dir = await workspace({ tasks: 'examples/tasks' });
    const script = path.join(REPO_ROOT, 'dist', 'examples', 'prompt-optimisation.js');
    const { stdout } = await promisify(execFile)(
      process.execPath,
      [script, '--tasks', path.join(dir, 'tasks'), '--jobs-dir', path.join(dir, 'jobs'), '--run', run],
      { cwd: dir, env: cliEnv(), timeout: 600_000 }
    );
    assert.match(stdout, /round 0: edit null → mean reward 0\.000 \(kept\)/);
    assert.match(stdout, /round 1: edit "\$ echo 'Hello world' > hello\.txt" → mean reward 0\.000 \(dropped\)/);
    assert.match(stdout, /round 2: edit "\$ echo 'Hello, world!' > hello\.txt" → mean reward 0\.333 \(kept\)/);
    assert.match(stdout, /round 4: .* → mean reward 0\.667 \(kept\)/);
    assert.match(stdout, /best mean reward 0\.667 with prompt:\n.*\n\$ echo 'Hello, world!' > hello\.txt\n\$ wc -w/);
    assert.doesNotMatch(stdout, /prompt:[\s\S]*Hello world'/);
  });
});
