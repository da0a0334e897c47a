/**
 * The "to confirm on a real account" probes of docs/daytona.md, as `npm run test:cloud` runs them against Daytona
 * itself (its filter `e2e.cloud-daytona` takes this file): each states one rule of Daytona's that Rollout relies on,
 * with its source (shared/research cloud-fidelity.md §2.3), and prints what it settled (t.diagnostic). In `npm test`
 * they run against the stand-in of Daytona's API (NOT Daytona), where they check the stand-in enforces the rule as
 * its source says. In both, they check what Rollout does with the reply: a run against Daytona that breaks one of
 * these assertions refutes a rule Rollout is built on.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import type { Sandbox } from '@daytonaio/sdk';
import { Daytona, DaytonaError } from '@daytonaio/sdk';

import { daytonaLastingQuota, daytonaQuotaMessage, isUnusableSnapshot } from '../../../src/environments/daytona/client';
import { pulledImage } from '../../../src/environments/daytona/images';
import { KILL_ALL } from '../../../src/environments/trial-container';
import { REAL_CLOUD } from '../../support/cloud-suite';
import type { DaytonaStandIn } from './daytona-stand-in';
import { startDaytonaStandIn } from './daytona-stand-in';

const where = REAL_CLOUD ? 'Daytona' : "the stand-in of Daytona's API";
const probeId = `rollout-probe-${process.pid}-${Date.now().toString(36)}`;
let standIn: DaytonaStandIn | null = null;
let daytona: Daytona;
const sandboxes: Sandbox[] = [];
const snapshots: string[] = [];

/** What a call answered: the error it threw (status and first line), or null when it was accepted. */
async function refusal(call: () => Promise<unknown>): Promise<DaytonaError | Error | null> {
  try {
    await call();
    return null;
  } catch (err) {
    return err as Error;
  }
}
/** The first page of the sandbox listing (the SDK's list is a paged iterator). */
const firstListed = async () => (await daytona.list()[Symbol.asyncIterator]().next()).value as unknown;
const describeRefusal = (err: Error | null) =>
  err
    ? `refused: ${err instanceof DaytonaError ? `HTTP ${String(err.statusCode)} ` : ''}${err.message.split('\n')[0]}`
    : 'accepted';

describe(`daytona probes on ${where} (docs/daytona.md: to confirm on a real account)`, () => {
  before(async () => {
    if (!REAL_CLOUD) {
      standIn = await startDaytonaStandIn();
      Object.assign(process.env, standIn.env);
    }
    daytona = new Daytona();
  });
  after(async () => {
    for (const sandbox of sandboxes) await sandbox.delete().catch(() => undefined);
    for (const name of snapshots) await daytona.snapshot.delete(name).catch(() => undefined);
    standIn?.setFaults({ rate: 0 });
    await standIn?.stop();
  });

  it('a missing snapshot at sandbox creation (sandbox.service.ts v0.190.0: 400 "Snapshot X not found")', async (t) => {
    const err = await refusal(() => daytona.create({ snapshot: `${probeId}-absent` }, { timeout: 60 }));
    t.diagnostic(`${where}: a sandbox from an absent snapshot: ${describeRefusal(err)}`);
    assert.ok(err, 'a sandbox from a snapshot that does not exist was created');
    if (!REAL_CLOUD) {
      assert.equal((err as DaytonaError).statusCode, 400);
      assert.match(err.message, /^Snapshot \S+ not found/);
    }
    // What Rollout relies on: the reply reads as "build the snapshot again", whether 400 or 404.
    assert.equal(isUnusableSnapshot(err), true, `Rollout would not rebuild on: ${err.message}`);
  });

  it('image names need an explicit tag and refuse ":latest" (snapshot.service.ts validateImageName)', async (t) => {
    const untagged = await refusal(() => daytona.snapshot.create({ name: `${probeId}-untagged`, image: 'debian' }));
    const latest = await refusal(() => daytona.snapshot.create({ name: `${probeId}-latest`, image: 'debian:latest' }));
    if (!untagged) snapshots.push(`${probeId}-untagged`);
    if (!latest) snapshots.push(`${probeId}-latest`);
    t.diagnostic(`${where}: image "debian": ${describeRefusal(untagged)}; "debian:latest": ${describeRefusal(latest)}`);
    if (!REAL_CLOUD) {
      assert.match(String(untagged?.message), /must include a tag/);
      assert.match(String(latest?.message), /":latest" are not allowed/);
    }
    // What Rollout relies on: such docker_images are built FROM the name, never sent as an image name.
    assert.equal(typeof pulledImage('debian'), 'object');
    assert.equal(typeof pulledImage('debian:latest'), 'object');
    assert.equal(pulledImage('debian:bookworm-slim'), 'debian:bookworm-slim');
  });

  it('a per-sandbox maximum (configuration.ts maxCpuPerSandbox 4: HTTP 403 "exceeds maximum allowed")', async (t) => {
    const name = `${probeId}-cpu64`;
    const err = await refusal(() =>
      daytona.snapshot.create({ name, image: 'debian:bookworm-slim', resources: { cpu: 64 } })
    );
    if (!err) snapshots.push(name);
    t.diagnostic(`${where}: a snapshot of 64 CPUs: ${describeRefusal(err)}`);
    assert.ok(err, 'a 64-CPU snapshot was accepted: the tier allows it');
    if (!REAL_CLOUD) assert.equal((err as DaytonaError).statusCode, 403);
    // What Rollout relies on: refused at once with Daytona's message, never waited on as if it would clear.
    assert.equal(daytonaLastingQuota(err), err.message, `Rollout would wait on: ${err.message}`);
  });

  it('the rate-limit reply (configuration.ts throttlers, @nestjs/throttler: HTTP 429)', async (t) => {
    // The stand-in throttles on demand; Daytona after its per-minute budget (30 parallel calls settle whether).
    standIn?.setFaults({ rate: 1 });
    const replies = await Promise.all(Array.from({ length: 30 }, () => refusal(firstListed)));
    standIn?.setFaults({ rate: 0 });
    const throttled = replies.filter((err) => err !== null);
    t.diagnostic(
      `${where}: 30 parallel list calls: ${throttled.length} refused; first: ${describeRefusal(throttled[0] ?? null)}`
    );
    if (!REAL_CLOUD) assert.equal(throttled.length, 30);
    for (const err of throttled) {
      // What Rollout relies on: a 429 is waited on (daytonaCall), not failed at once.
      assert.equal((err as DaytonaError).statusCode, 429, err.message);
      assert.ok(daytonaQuotaMessage(err), `Rollout would not wait on: ${err.message}`);
      assert.equal(daytonaLastingQuota(err), null);
    }
  });

  it('the daemon is PID 1 (runner container_configs.go: entrypoint DAEMON_PATH), so the kill of all spares it; an inactive snapshot refuses sandboxes and activates again (snapshot.service.ts activateSnapshot)', async (t) => {
    const name = `${probeId}-probe`;
    snapshots.push(name);
    const snapshot = await daytona.snapshot.create({ name, image: 'debian:bookworm-slim' });
    t.diagnostic(`${where}: snapshot ${name} is ${snapshot.state}`);
    const sandbox = await daytona.create({ snapshot: name, autoDeleteInterval: 0 }, { timeout: 120 });
    sandboxes.push(sandbox);
    const pid1 = await sandbox.process.executeCommand('cat /proc/1/cmdline | tr "\\0" " "');
    const killed = await sandbox.process.executeCommand(`${KILL_ALL}; echo "exit $?"`);
    const after = await sandbox.process.executeCommand('echo alive');
    t.diagnostic(
      `${where}: PID 1 runs "${pid1.result.trim()}"; the kill of all: ${killed.result.trim() || '(no output)'}`
    );
    // What Rollout relies on: the toolbox still runs commands after KILL_ALL.
    assert.equal(after.exitCode, 0);
    assert.equal(after.result.trim(), 'alive');

    if (REAL_CLOUD) {
      // A snapshot goes inactive after 14 days unused: not something a probe can wait for.
      const again = await refusal(() => daytona.snapshot.activate(name));
      t.diagnostic(`${where}: activating an active snapshot: ${describeRefusal(again)}`);
      return;
    }
    assert.ok(standIn);
    await standIn.retireImages?.('inactive');
    const inactive = await refusal(() => daytona.create({ snapshot: name }, { timeout: 60 }));
    t.diagnostic(`${where}: a sandbox from an inactive snapshot: ${describeRefusal(inactive)}`);
    assert.match(String(inactive?.message), /is inactive/);
    assert.equal(isUnusableSnapshot(inactive), true, 'Rollout would wait on an inactive snapshot');
    const activated = await daytona.snapshot.activate(name);
    t.diagnostic(`${where}: activated, the snapshot is ${activated.state}`);
    assert.notEqual(activated.state, 'inactive');
  });
});
