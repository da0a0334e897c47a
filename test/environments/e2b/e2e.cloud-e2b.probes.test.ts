/**
 * The "to confirm on a real account" probes of docs/e2b.md, as `npm run test:cloud` runs them against E2B itself (its
 * filter `e2e.cloud-e2b` takes this file): each states one rule of E2B's that Rollout relies on, with its source
 * (shared/research cloud-fidelity.md §2.4), and prints what it settled (t.diagnostic). In `npm test` they run against
 * the stand-in of E2B (NOT E2B), where they check the stand-in enforces the rule as its source says. In both, they
 * check what Rollout does with the reply: a run against E2B that breaks one of these assertions refutes a rule
 * Rollout is built on.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import type { Sandbox } from 'e2b';
import { InvalidArgumentError, Sandbox as E2BSandbox, Template } from 'e2b';

import { SandboxCommands } from '../../../src/environments/e2b/exec';
import { e2bQuotaMessage } from '../../../src/environments/e2b/client';
import { E2BSettingsSchema } from '../../../src/environments/e2b/settings';
import { REAL_CLOUD } from '../../support/cloud-suite';
import type { E2BStandIn } from './e2b-stand-in';
import { startE2BStandIn } from './e2b-stand-in';

const where = REAL_CLOUD ? 'E2B' : 'the stand-in of E2B';
const probeId = `rollout-probe-${process.pid}-${Date.now().toString(36)}`;
let standIn: E2BStandIn | null = null;
/** The probes' template: E2B's own `base` on E2B, a Debian one built on the stand-in. */
let template = 'base';
const made: Sandbox[] = [];
const templates: string[] = [];

async function refusal(call: () => Promise<unknown>): Promise<Error | null> {
  try {
    await call();
    return null;
  } catch (err) {
    return err as Error;
  }
}
const describeRefusal = (err: Error | null) =>
  err ? `refused: ${err.name}: ${err.message.split('\n')[0]}` : 'accepted';

async function sandbox(options: { timeoutMs?: number } = {}): Promise<Sandbox> {
  const created = await E2BSandbox.create(template, { timeoutMs: 600_000, ...options });
  made.push(created);
  return created;
}

/** The comm of every process but the shell that lists them. */
async function processNames(box: Sandbox): Promise<string[]> {
  const listed = await box.commands.run(
    'for d in /proc/[0-9]*; do read -r c < $d/comm && echo "$c"; done 2>/dev/null',
    {
      user: 'root',
    }
  );
  return listed.stdout.split('\n').filter(Boolean).sort();
}

describe(`e2b probes on ${where} (docs/e2b.md: to confirm on a real account)`, () => {
  before(async () => {
    if (!REAL_CLOUD) {
      standIn = await startE2BStandIn();
      Object.assign(process.env, standIn.env);
      template = `${probeId}-debian`;
      templates.push(template);
      await Template.build(Template().fromImage('debian:bookworm-slim'), template);
    }
  });
  after(async () => {
    for (const box of made) await box.kill().catch(() => undefined);
    // A template is deleted as a snapshot is (DELETE /templates/{id}), as Rollout deletes it.
    for (const name of templates) await E2BSandbox.deleteSnapshot(name).catch(() => undefined);
    standIn?.setFaults({ rate: 0 });
    await standIn?.stop();
  });

  it('template resources (infra team/limits.go: CPUs 1 or even, at most 32; memory even)', async (t) => {
    const name = `${probeId}-cpu3`;
    const err = await refusal(() =>
      Template.build(Template().fromImage('debian:bookworm-slim'), name, { cpuCount: 3, memoryMB: 1025 })
    );
    if (!err) templates.push(name);
    t.diagnostic(`${where}: a template of 3 CPUs and 1025 MB: ${describeRefusal(err)}`);
    assert.ok(err, 'a template of 3 CPUs was accepted');
    if (!REAL_CLOUD) assert.match(err.message, /CPU count must be 1 or an even number/);
    // What Rollout relies on: such sizes are refused in job.yaml, before anything starts.
    assert.equal(E2BSettingsSchema.safeParse({ cpu_count: 3 }).success, false);
    assert.equal(E2BSettingsSchema.safeParse({ memory_mb: 1025 }).success, false);
    assert.equal(E2BSettingsSchema.safeParse({ cpu_count: 2, memory_mb: 1024 }).success, true);
  });

  it('the team\'s maximum sandbox length (infra handlers/timeout_helper.go: 400 "Timeout cannot be greater than N hours")', async (t) => {
    const err = await refusal(() => sandbox({ timeoutMs: 25 * 3600_000 }));
    t.diagnostic(`${where}: a sandbox of 25 h: ${describeRefusal(err)}`);
    assert.ok(err, 'a sandbox longer than any plan allows (24 h) was created');
    // What Rollout relies on: it reads the plan's maximum from the reply and creates the sandbox for that long.
    const hours = /Timeout cannot be greater than (\d+) hours/.exec(err.message)?.[1];
    assert.ok(hours, `Rollout cannot read the maximum from: ${err.message}`);
  });

  it('a cwd that does not exist (envd process/handler/handler.go:239: InvalidArgument, not an exit code)', async (t) => {
    const box = await sandbox();
    const err = await refusal(() => box.commands.run('true', { cwd: '/no/such/dir', user: 'root' }));
    t.diagnostic(`${where}: a command in /no/such/dir: ${describeRefusal(err)}`);
    assert.ok(err instanceof InvalidArgumentError, `not an RPC error: ${describeRefusal(err)}`);
    // What Rollout relies on: it reads that as the command's exit 1, as on every other provider.
    const commands = new SandboxCommands(() => Promise.resolve(box));
    const result = await commands.exec({ id: box.sandboxId, workdir: '/' }, { command: 'true', cwd: '/no/such/dir' });
    assert.equal(result.exitCode, 1);
  });

  it('what a sandbox runs, and what the kill of all after a step leaves (infra envd.service.tpl: envd first, services after)', async (t) => {
    const box = await sandbox();
    const handle = { id: box.sandboxId, workdir: '/' };
    const commands = new SandboxCommands(() => Promise.resolve(box));
    const pid1 = await box.commands.run('cat /proc/1/comm', { user: 'root' });
    // A service that starts after envd (on the stand-in, whose sandboxes boot none; on E2B, beside systemd's own).
    const service = 'cp "$(command -v sleep)" /tmp/late-service && (setsid /tmp/late-service 900 >/dev/null 2>&1 &)';
    assert.equal((await box.commands.run(service, { user: 'root' })).exitCode, 0);
    await commands.settle(handle);
    const before = await processNames(box);
    const agent = 'cp "$(command -v sleep)" /tmp/agent-daemon && (setsid /tmp/agent-daemon 900 >/dev/null 2>&1 &)';
    assert.equal((await box.commands.run(agent, { user: 'root' })).exitCode, 0);
    await commands.killAll(handle);
    const left = await processNames(box);
    t.diagnostic(`${where}: PID 1 is "${pid1.stdout.trim()}"; running before the agent: ${before.join(' ')}`);
    t.diagnostic(`${where}: after the kill of all: ${left.join(' ')}`);
    const lost = before.filter((c) => !left.includes(c) && c !== 'bash' && c !== 'sh');
    t.diagnostic(`${where}: the sandbox's own processes the kill took: ${lost.join(' ') || 'none'}`);
    // What Rollout relies on: envd (under either name), the sandbox's services and the settled mark survive, so the
    // next step runs in the sandbox as it booted; the agent's daemon does not.
    assert.ok(left.includes('envd') || left.includes('envd.next'), left.join(' '));
    assert.deepEqual(lost, []);
    assert.ok(left.includes('late-service') && left.includes('rollout-settled'), left.join(' '));
    assert.ok(!left.includes('agent-daemon'), left.join(' '));
    assert.equal((await box.commands.run('echo alive', { user: 'root' })).stdout.trim(), 'alive');
  });

  it("the rate-limit reply (infra: HTTP 429, the SDK's RateLimitError)", async (t) => {
    // The stand-in throttles on demand; E2B after the team's API rate (30 parallel calls settle whether).
    standIn?.setFaults({ rate: 1 });
    const replies = await Promise.all(
      Array.from({ length: 30 }, () => refusal(() => E2BSandbox.list({ limit: 1 }).nextItems()))
    );
    standIn?.setFaults({ rate: 0 });
    const throttled = replies.filter((err) => err !== null);
    t.diagnostic(
      `${where}: 30 parallel list calls: ${throttled.length} refused; first: ${describeRefusal(throttled[0] ?? null)}`
    );
    if (!REAL_CLOUD) assert.equal(throttled.length, 30);
    // What Rollout relies on: each is read as a rate limit and waited on (withE2BQuota), not failed at once.
    for (const err of throttled) assert.ok(e2bQuotaMessage(err), `Rollout would not wait on: ${describeRefusal(err)}`);
  });
});
