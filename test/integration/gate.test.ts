/**
 * The CI gate on a finished job folder, through the real CLI (`rollout status <folder>`): the table with intervals
 * and pass@k, `--fail-under` and `--max-errors` exiting 4 after the full report, JUnit XML, and exit-code precedence.
 */
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { before, describe, it } from 'node:test';

import { judge, parseGateOptions } from '../../src/cli/gate';
import { runCli, workspace } from '../support/cli';
import { writeJobFolder } from '../support/job-folder';
import type { FixtureTrial } from '../support/job-folder';

let dir: string;
let jobDir: string;

describe('CI gate on a finished job folder', () => {
  before(async () => {
    dir = await workspace();
    const trials: FixtureTrial[] = [];
    for (const task of ['alpha', 'beta', 'gamma'])
      for (let attempt = 1; attempt <= 3; attempt++) {
        // solver passes alpha and beta always, gamma once; guesser passes alpha on its first attempt only.
        trials.push({ task, agent: 'solver', attempt, rewards: { reward: task !== 'gamma' || attempt === 2 ? 1 : 0 } });
        trials.push(
          task === 'beta' && attempt === 3
            ? {
                task,
                agent: 'guesser',
                attempt,
                rewards: null,
                error: { type: 'AgentTimeoutError', message: 'agent ran over 60 s <limit>', step: 'execute' },
              }
            : { task, agent: 'guesser', attempt, rewards: { reward: task === 'alpha' && attempt === 1 ? 1 : 0 } }
        );
      }
    jobDir = await writeJobFolder(dir, { name: 'gated', trials, metrics: ['mean', 'max'] });
  });

  it('prints n, mean, the 95% interval and pass@k for every k ≤ n_attempts', async () => {
    const run = await runCli(['status', jobDir], { cwd: dir });
    assert.equal(run.code, 0, run.stderr);
    assert.match(
      run.stdout,
      /agent\s+dataset\s+reward\s+n\s+trials\s+errors\s+mean\s+ci95\s+max\s+pass@1\s+pass@2\s+pass@3/
    );
    // solver: 7 of 9 pass; pass@1 = (1 + 1 + 1/3)/3, pass@2 = (1 + 1 + 2/3)/3, pass@3 = 1. Three tasks of 0/1
    // rewards: a Wilson interval on the effective trials of three tasks (docs/results.md), inside [0, 1].
    assert.match(
      run.stdout,
      /solver\s+tasks\s+reward\s+9\s+9\s+0\s+0\.778\s+\[0\.173, 0\.983\]\s+1\s+0\.778\s+0\.889\s+1\n/
    );
    assert.match(
      run.stdout,
      /guesser\s+tasks\s+reward\s+9\s+9\s+1\s+0\.111\s+\[0\.007, 0\.680\]\s+1\s+0\.111\s+0\.222\s+0\.333\n/
    );
  });

  it('exits 4 after the full report when a threshold is missed, and 0 when all are met', async () => {
    const failed = await runCli(['status', jobDir, '--fail-under', 'reward=0.5', '--fail-under', 'reward:pass@3=0.3'], {
      cwd: dir,
    });
    assert.equal(failed.code, 4, failed.stderr);
    assert.ok(failed.stdout.indexOf('agent') < failed.stdout.indexOf('gate:'), 'report before verdict');
    assert.match(failed.stdout, /pass {2}solver__tasks reward mean 0\.7778 ≥ 0\.5/);
    assert.match(failed.stdout, /FAIL {2}guesser__tasks reward mean 0\.1111 < 0\.5/);
    assert.match(failed.stdout, /pass {2}guesser__tasks reward pass@3 0\.3333 ≥ 0\.3/);
    const passed = await runCli(['status', jobDir, '--fail-under', '0.1'], { cwd: dir });
    assert.equal(passed.code, 0, passed.stdout);
  });

  it('exits 4 when more trials errored than --max-errors allows', async () => {
    assert.equal((await runCli(['status', jobDir, '--max-errors', '1'], { cwd: dir })).code, 0);
    const run = await runCli(['status', jobDir, '--max-errors', '0'], { cwd: dir });
    assert.equal(run.code, 4);
    assert.match(run.stdout, /FAIL {2}errored trials 1 > 0/);
  });

  it('writes JUnit XML: a case per trial, errors and rewards below --pass-threshold failed, with their message', async () => {
    const file = path.join(dir, 'out', 'junit.xml');
    const run = await runCli(['status', jobDir, '--junit', file, '--pass-threshold', '0.5'], { cwd: dir });
    assert.equal(run.code, 0, run.stderr);
    const xml = await readFile(file, 'utf8');
    assert.match(
      xml,
      /^<\?xml version="1\.0" encoding="UTF-8"\?>\n<testsuites name="gated" tests="18" failures="9" errors="1" skipped="0">/
    );
    assert.match(xml, /<testsuite name="solver__tasks" tests="9" failures="2" errors="0" skipped="0">/);
    assert.match(
      xml,
      /<testcase classname="gated\.solver__tasks" name="gamma__solver__1" time="8\.000"><failure type="reward" message="reward 0 &lt; 0\.5"\/><\/testcase>/
    );
    assert.match(
      xml,
      /name="beta__guesser__3" time="8\.000"><error type="AgentTimeoutError" message="AgentTimeoutError in execute: agent ran over 60 s &lt;limit&gt;"\/>/
    );
    assert.match(xml, /name="alpha__solver__1" time="8\.000"><\/testcase>/);
  });

  it("names the primary key in a JUnit failure: a reward.json task's first key, not `reward`", async () => {
    const keyed = await writeJobFolder(dir, {
      name: 'keyed',
      trials: [
        { task: 'word-count', agent: 'greeter', attempt: 1, rewards: { words: 1, lines: 0 } },
        { task: 'silent', agent: 'greeter', attempt: 1, rewards: {} },
      ],
      metrics: ['mean'],
    });
    const file = path.join(dir, 'out', 'keyed.xml');
    assert.equal((await runCli(['status', keyed, '--junit', file], { cwd: dir })).code, 0);
    const xml = await readFile(file, 'utf8');
    assert.match(xml, /name="word-count__greeter__1" [^>]*><failure type="reward" message="lines 0 &lt; 1"\/>/);
    assert.match(xml, /name="silent__greeter__1" [^>]*><failure type="reward" message="no reward 0 &lt; 1"\/>/);
  });

  it('checks the interval statistics against the same numbers the table prints, and says when there is none', async () => {
    const run = await runCli(['status', jobDir, '--fail-under', 'reward:ci95_low=0.1'], { cwd: dir });
    assert.equal(run.code, 4, run.stderr);
    assert.match(run.stdout, /pass {2}solver__tasks reward ci95_low 0\.1735 ≥ 0\.1/);
    assert.match(run.stdout, /FAIL {2}guesser__tasks reward ci95_low 0\.0073 < 0\.1/);
    const verdict = judge(
      {
        evals: {
          a__d: {
            agent: 'a',
            dataset: 'd',
            n_trials: 1,
            n_scored_trials: 1,
            n_errors: 0,
            metrics: { reward: { n: 1, mean: 1, ci95: null } },
            usage: null,
          },
        },
        n_errored_trials: 0,
        n_infrastructure_errors: 0,
      },
      parseGateOptions({ failUnder: ['reward:ci95_high=0.5'] })
    );
    assert.equal(verdict.passed, false);
    assert.deepEqual(verdict.lines, ['FAIL  a__d reward ci95_high n/a (too few tasks for an honest interval) < 0.5']);
  });

  it('keeps exit 2 for bad input over 4: a malformed threshold, a key no eval reports', async () => {
    const malformed = await runCli(['status', jobDir, '--fail-under', 'reward=lots', '--max-errors', '0'], {
      cwd: dir,
    });
    assert.equal(malformed.code, 2);
    assert.equal(
      malformed.stderr,
      'error: command line: --fail-under: "reward=lots": expected [<reward key>[:<mean|sum|min|max|ci95_low|ci95_high|pass@k>]=]<number>\n'
    );
    assert.equal(malformed.stdout, '', 'nothing reported before the input is checked');
    const unknown = await runCli(['status', jobDir, '--fail-under', 'accuracy=0.5', '--max-errors', '0'], { cwd: dir });
    assert.equal(unknown.code, 2);
    assert.match(unknown.stderr, /^error: command line: --fail-under: "accuracy=0\.5": no eval reports that key\n$/);
  });

  it('keeps exit 3 for an unreachable Temporal server over 4', async () => {
    const run = await runCli(['status', 'no-such-job', '--fail-under', '0.99'], {
      cwd: dir,
      env: { TEMPORAL_ADDRESS: '127.0.0.1:1' },
    });
    assert.equal(run.code, 3, run.stderr);
  });
});
