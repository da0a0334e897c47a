/**
 * The "to confirm on a real account" probes of docs/modal.md, as `npm run test:cloud` runs them against Modal itself
 * (its filter `e2e.cloud-modal` takes this file): each prints what it settled (t.diagnostic). In `npm test` they run
 * against the stand-in of Modal's API (NOT Modal), where they check the stand-in answers as the docs say it does.
 * Nothing here asserts what Modal will answer: only that the probe ran, and what Rollout relies on (PID 1 survives
 * the kill of all).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import type { App, Image, Sandbox } from 'modal';
import { ModalClient } from 'modal';

import { REAL_CLOUD } from '../../support/cloud-suite';
import type { ModalStandIn } from './modal-stand-in';
import { startModalStandIn } from './modal-stand-in';

const where = REAL_CLOUD ? 'Modal' : "the stand-in of Modal's API";
const quiet = { debug() {}, info() {}, warn() {}, error() {} };
let standIn: ModalStandIn | null = null;
let client: ModalClient;
let app: App;
let image: Image;
const made: Sandbox[] = [];

/** What a refused call answered, as one line (or "accepted"). */
const outcome = (promise: Promise<unknown>) =>
  promise.then(
    () => 'accepted',
    (err: unknown) => `refused: ${String(err).split('\n')[0]}`
  );

describe(`modal probes on ${where} (docs/modal.md: to confirm on a real account)`, () => {
  before(async () => {
    if (!REAL_CLOUD) {
      standIn = await startModalStandIn();
      Object.assign(process.env, standIn.env);
    }
    client = new ModalClient({ logger: quiet });
    app = await client.apps.fromName(process.env.ROLLOUT_TEST_MODAL_APP ?? 'rollout-test', { createIfMissing: true });
    image = client.images.fromRegistry('debian:bookworm-slim');
  });
  after(async () => {
    for (const sandbox of made) await sandbox.terminate().catch(() => undefined);
    await standIn?.stop();
  });

  it('PID 1 of a sandbox started with sleep infinity, and whether kill -9 -1 leaves it running', async (t) => {
    const sandbox = await client.sandboxes.create(app, image, { command: ['sleep', 'infinity'], timeoutMs: 300_000 });
    made.push(sandbox);
    const pid1 = await sandbox.exec(['cat', '/proc/1/comm']);
    const comm = (await pid1.stdout.readText()).trim();
    await (await sandbox.exec(['/bin/sh', '-c', 'kill -9 -1; true'])).wait();
    const running = (await sandbox.poll()) === null;
    t.diagnostic(`${where}: PID 1 is "${comm}"; after kill -9 -1 the sandbox is ${running ? 'running' : 'ended'}`);
    assert.equal(running, true, 'Rollout’s kill of all relies on PID 1 surviving it');
  });

  it('tag values with "/" and of 100 characters; the "any" GPU type and 5 A10s', async (t) => {
    const sandbox = await client.sandboxes.create(app, image, { command: ['sleep', 'infinity'], timeoutMs: 300_000 });
    made.push(sandbox);
    const slash = await outcome(sandbox.setTags({ 'rollout.trial': 'a/b' }));
    const long = await outcome(sandbox.setTags({ 'rollout.trial': 'x'.repeat(100) }));
    const anyGpu = await outcome(client.sandboxes.create(app, image, { gpu: 'any:1', timeoutMs: 60_000 }));
    const manyA10 = await outcome(client.sandboxes.create(app, image, { gpu: 'A10:5', timeoutMs: 60_000 }));
    t.diagnostic(`${where}: tag "a/b": ${slash}; 100-character tag: ${long}`);
    t.diagnostic(`${where}: gpu any:1: ${anyGpu}; gpu A10:5: ${manyA10}`);
    if (!REAL_CLOUD) {
      // The stand-in answers as docs/modal.md says it does.
      assert.deepEqual(
        [slash, long, anyGpu, manyA10].map((line) => line.startsWith('refused: ')),
        [true, true, true, true]
      );
      assert.doesNotMatch([slash, long].join(), /UNIMPLEMENTED/);
    }
  });

  it('an App looked up in an Environment the workspace does not have', async (t) => {
    const missing = await outcome(
      client.apps.fromName('rollout-probe', { environment: `absent-${Date.now()}`, createIfMissing: true })
    );
    t.diagnostic(`${where}: an absent Environment: ${missing}`);
    assert.match(missing, /^refused: /);
  });
});
