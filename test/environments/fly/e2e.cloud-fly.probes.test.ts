/**
 * The "to confirm on a real account" probes of docs/fly.md, as `npm run test:cloud` runs them against Fly itself (its
 * filter `e2e.cloud-fly` takes this file; FLY_API_TOKEN and ROLLOUT_TEST_FLY_APP): each states one rule of Fly's that
 * Rollout relies on, with its source (shared/research cloud-fidelity.md §2.1), and prints what it settled
 * (t.diagnostic). In `npm test` they run against the stand-in of Fly's Machines API (NOT Fly), where they check the
 * stand-in enforces the rule as docs/fly.md says. In both, they check what Rollout does under it: a run against Fly
 * that breaks one of these assertions refutes a rule Rollout is built on.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import { DEFAULT_FLY_API, FlyApi, FlyApiError, flyQuotaMessage } from '../../../src/environments/fly/client';
import { flyGuestSize } from '../../../src/environments/fly/guest';
import { MachineExec } from '../../../src/environments/fly/exec';
import type { CloudStandIn } from '../../support/cloud-stand-in';
import { REAL_CLOUD } from '../../support/cloud-suite';
import { startFlyStandIn } from './fly-stand-in';

const where = REAL_CLOUD ? 'Fly' : "the stand-in of Fly's Machines API";
const probeId = `rollout-probe-${process.pid}-${Date.now().toString(36)}`;
let standIn: CloudStandIn | null = null;
let api: FlyApi;
let app: string;
let machineId = '';
const made: string[] = [];

async function refusal(call: () => Promise<unknown>): Promise<Error | null> {
  try {
    await call();
    return null;
  } catch (err) {
    return err as Error;
  }
}
const describeRefusal = (err: Error | null) => (err ? `refused: ${err.message.split('\n')[0]}` : 'accepted');
const sh = (script: string) => ['/bin/sh', '-c', script];

/** One request to the Machines API as sent, without Rollout's backoff: its status and body. */
async function raw(method: string, path: string, body?: unknown): Promise<{ status: number; text: string }> {
  const base = process.env.FLY_FLAPS_BASE_URL ?? DEFAULT_FLY_API;
  const response = await fetch(`${base}${path}`, {
    method,
    headers: { authorization: `Bearer ${process.env.FLY_API_TOKEN}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(120_000),
  });
  return { status: response.status, text: await response.text() };
}

async function machine(guest: { cpu_kind: string; cpus: number; memory_mb: number }): Promise<string> {
  const created = await api.createMachine(app, {
    name: `${probeId}-${made.length}`,
    config: {
      image: 'debian:bookworm-slim',
      init: { cmd: ['sleep', 'infinity'] },
      guest,
      metadata: { rollout_probe: probeId },
      auto_destroy: true,
      restart: { policy: 'no' },
    },
  });
  made.push(created.id);
  await api.waitFor(app, created.id, 'started');
  return created.id;
}

describe(`fly probes on ${where} (docs/fly.md: to confirm on a real account)`, () => {
  before(async () => {
    if (!REAL_CLOUD) {
      standIn = await startFlyStandIn();
      Object.assign(process.env, standIn.env);
    }
    app = process.env.ROLLOUT_TEST_FLY_APP ?? process.env.FLY_APP ?? '';
    assert.ok(app, 'ROLLOUT_TEST_FLY_APP names the app the probes run machines in');
    api = new FlyApi(process.env.FLY_API_TOKEN ?? '', process.env.FLY_FLAPS_BASE_URL ?? DEFAULT_FLY_API);
    machineId = await machine({ cpu_kind: 'shared', cpus: 1, memory_mb: 256 });
  });
  after(async () => {
    standIn?.setFaults({ rate: 0 });
    for (const id of made) await api.destroy(app, id).catch(() => undefined);
    await standIn?.stop();
  });

  it("the API proxy's window (fly-go flaps_machines_wait.go:19 proxyTimeoutThreshold = 60 s): one exec of 65 s", async (t) => {
    const ref = { id: `${app}/${machineId}`, workdir: '/' };
    const [oneRequest, rollout] = await Promise.all([
      raw('POST', `/v1/apps/${app}/machines/${machineId}/exec`, { command: sh('sleep 65; echo done'), timeout: 120 }),
      new MachineExec(() => api).exec(ref, { command: 'sleep 65; echo done', timeoutMs: 180_000 }),
    ]);
    t.diagnostic(
      `${where}: one exec of sleep 65 (timeout 120): HTTP ${oneRequest.status} ${oneRequest.text.slice(0, 200)}`
    );
    if (!REAL_CLOUD) assert.equal(oneRequest.status, 408);
    // What Rollout relies on: its detached command and short polls carry a step of any length.
    assert.deepEqual([rollout.exitCode, rollout.stdout.trim(), rollout.timedOut], [0, 'done', false]);
  });

  it('a process an exec started detached outlives the exec (Rollout starts every command so)', async (t) => {
    await api.exec(app, machineId, { command: sh('setsid sleep 300 </dev/null >/dev/null 2>&1 &'), timeout: 30 });
    const listed = await api.exec(app, machineId, {
      command: sh('for d in /proc/[0-9]*; do cat $d/cmdline 2>/dev/null | tr "\\0" " "; echo; done'),
      timeout: 30,
    });
    const sleeping = (listed.stdout ?? '').split('\n').some((line) => line.trim() === 'sleep 300');
    t.diagnostic(`${where}: after its exec ended, "sleep 300" is ${sleeping ? 'running' : 'gone'}`);
    assert.equal(sleeping, true);
  });

  it('the largest exec body (not published: Rollout sends 4 MiB of base64; the stand-in refuses over 8 MiB)', async (t) => {
    const body = (mib: number) => ({ command: sh('wc -c'), stdin: 'A'.repeat(mib * 2 ** 20), timeout: 30 });
    const four = await raw('POST', `/v1/apps/${app}/machines/${machineId}/exec`, body(4));
    const sixteen = await raw('POST', `/v1/apps/${app}/machines/${machineId}/exec`, body(16));
    t.diagnostic(`${where}: 4 MiB of stdin: HTTP ${four.status} ${four.text.slice(0, 120)}`);
    t.diagnostic(`${where}: 16 MiB of stdin: HTTP ${sixteen.status} ${sixteen.text.slice(0, 120)}`);
    // What Rollout relies on: a piece of a file (CHUNK_BYTES, 4 MiB as base64) travels in one exec.
    assert.equal(four.status, 200, four.text);
    assert.match(four.text, new RegExp(`"stdout":"${4 * 2 ** 20}\\\\n"`));
    if (!REAL_CLOUD) assert.equal(sixteen.status, 413);
  });

  it('an invalid guest (flyctl update.go cpusPerKind: shared CPUs 1/2/4/6/8; fly-go MAX_MEMORY_MB_PER_SHARED_CPU 2048)', async (t) => {
    const err = await refusal(() => machine({ cpu_kind: 'shared', cpus: 16, memory_mb: 4096 }));
    t.diagnostic(`${where}: a shared guest of 16 CPUs: ${describeRefusal(err)}`);
    assert.ok(err, 'a shared guest of 16 CPUs was created');
    if (!REAL_CLOUD) assert.equal((err as FlyApiError).status, 422);
    // What Rollout relies on: it never asks for such a guest; it rounds up within the rules or refuses the task.
    assert.equal('field' in flyGuestSize({ cpus: 16, memoryMb: 4096 }, 'shared'), true);
    assert.deepEqual(flyGuestSize({ cpus: 1, memoryMb: 4096 }, 'shared'), { cpus: 2, memoryMb: 4096 });
  });

  it('the rate-limit reply (429, per action and per machine) and metadata filters on listing', async (t) => {
    standIn?.setFaults({ rate: 1 });
    const replies = await Promise.all(Array.from({ length: 30 }, () => raw('GET', `/v1/apps/${app}/machines`)));
    const throttled = replies.filter(({ status }) => status === 429);
    t.diagnostic(
      `${where}: 30 parallel list calls: ${throttled.length} answered 429; first: ${throttled[0]?.text ?? '-'}`
    );
    if (!REAL_CLOUD) assert.equal(throttled.length, 30);
    for (const { text } of throttled) {
      // What Rollout relies on: it reads the reply as a rate limit and waits (every FlyApi call), not fails.
      const message = (JSON.parse(text) as { error?: string }).error ?? text;
      assert.ok(flyQuotaMessage(new FlyApiError(429, message, 'listing machines')));
    }
    const waited = api.machines(app, { rollout_probe: probeId });
    setTimeout(() => standIn?.setFaults({ rate: 0 }), 1500);
    const mine = await waited;
    // Rollout filters again on its side (Fly's listing may ignore metadata filters).
    const ids = mine.filter((m) => m.config?.metadata?.rollout_probe === probeId).map((m) => m.id);
    assert.deepEqual(ids, [machineId]);
    const filtered = JSON.parse(
      (await raw('GET', `/v1/apps/${app}/machines?metadata.rollout_probe=${probeId}-absent`)).text
    ) as unknown[];
    t.diagnostic(`${where}: listing with a metadata filter nothing matches: ${filtered.length} machines`);
    if (!REAL_CLOUD) assert.equal(filtered.length, 0);
  });
});
