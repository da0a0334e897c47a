/**
 * Issue 31, nothing lost, nothing run twice, nothing leaked, under chaos: a few hundred trials through the simulated
 * cloud provider (test/fixtures/providers/folder-sandbox: a stand-in vendor whose sandboxes are folders, answering a
 * share of its calls with 429) on three real worker processes, one of them killed with SIGKILL every few seconds and
 * restarted, and the Temporal server restarted once mid-run. Every trial ends with one result, no verifier runs twice
 * on a sandbox, and no sandbox is left once the reaper's period has passed. (`npm run bench -- chaos` is the large run.)
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import type { Client, Connection } from '@temporalio/client';

import type { ChaosReport } from '../support/chaos-run';
import { runChaosJob } from '../support/chaos-run';
import { TEST_ADDRESS, startTestServer, stopTestServer, testTemporal } from '../support/temporal';

const TRIALS = 300;
/** The janitor's period (workers/create-workers.ts) and some slack: the longest a leak may outlive its trial. */
const LEAK_BOUND_MS = 60_000 + 45_000;
let client: Client;
let connection: Connection;
let report: ChaosReport;

describe('a job under chaos: worker kills, a server restart, rate-limit replies', () => {
  before(async () => {
    ({ client, connection } = await testTemporal());
    report = await runChaosJob({
      client,
      address: TEST_ADDRESS,
      trials: TRIALS,
      concurrent: 100,
      workers: 3,
      holdSec: 2,
      killEveryMs: 8_000,
      rateLimited: 0.1,
      createsPerSecond: 50,
      restartServer: async () => {
        await stopTestServer();
        await startTestServer();
      },
      // A bound against a hang, not a time target: a loaded CI machine runs this in 2 to 4 minutes.
      timeoutMs: 15 * 60_000,
      leakWaitMs: LEAK_BOUND_MS,
      progress: (line) => console.error(line),
    });
    console.error(JSON.stringify(report));
  });
  after(async () => {
    await connection.close();
  });

  it('was chaos: workers killed, the server restarted, the vendor answered 429', () => {
    assert.ok(report.kills >= 2, `kills: ${report.kills}`);
    assert.ok(report.serverRestartSec > 0, 'the server was restarted');
    assert.ok(report.rateLimitReplies > 0, `429 replies: ${report.rateLimitReplies}`);
  });

  it('lost no trial: every one has its result, no error but a spent restart budget', () => {
    assert.equal(report.lost, 0);
    // A trial whose step three kills cut ends as an infrastructure error (its restart budget spent): recorded, not
    // lost. Any other error is a fault.
    assert.deepEqual(
      report.failures.filter((failure) => !/InfrastructureError: .*\(after \d+ restarts\)/.test(failure)),
      []
    );
  });

  it('had no worker exit but those it killed', () => {
    assert.deepEqual(report.workerCrashes, []);
  });

  it('ran nothing twice: no verifier ran twice on a sandbox, no trial counted twice', () => {
    assert.equal(report.duplicated, 0);
  });

  it('left no sandbox once the reaper had its period', () => {
    assert.equal(report.sandboxesLeft, 0);
  });
});
