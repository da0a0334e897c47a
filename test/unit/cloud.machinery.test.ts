/**
 * What the cloud sandbox providers share (src/environments/kit/): the quota backoff (waits on a vendor's quota
 * reply, passes other errors at once, ends in a CloudQuotaError carrying the vendor's message), sandbox labels and
 * their reading back, the lifetime from a trial's budget; and job.yaml's max_sandboxes capping the job's concurrency.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { jobInput } from '../../src/api/submit';
import { fittedGuest } from '../../src/environments/kit/guest-size';
import { CloudQuotaError, quotaMaxWaitMs, withQuotaBackoff } from '../../src/environments/kit/quota';
import {
  heldSandbox,
  rolloutLabels,
  sandboxLabels,
  sandboxLifetimeSec,
} from '../../src/environments/kit/cloud-sandbox';
import type { ListedSandbox } from '../../src/environments/kit/sandbox-listing';
import { heldSandboxes, removeTrialSandboxes } from '../../src/environments/kit/sandbox-listing';
import type { ResolvedJob } from '../../src/job/load';
import type { JobPlan } from '../../src/job/plan';
import { JobConfigSchema } from '../../src/job/checks';
import { E2BSettingsSchema } from '../../src/environments/e2b/settings';
import { flyGuestSize } from '../../src/environments/fly/guest';
import { labelsOfModalTags, modalTags } from '../../src/environments/modal/tags';

const owner = { hostId: 'host-a', deployment: 'dep-1' };
const quota = (err: unknown) => (err instanceof Error && err.message.startsWith('429 ') ? err.message.slice(4) : null);

describe('cloud providers: shared machinery', () => {
  it('waits on quota replies with backoff and then succeeds', async () => {
    let calls = 0;
    const waits: number[] = [];
    const value = await withQuotaBackoff(
      'vendor',
      quota,
      () => (++calls < 3 ? Promise.reject(new Error('429 too many sandboxes')) : Promise.resolve('ok')),
      { maxWaitMs: 5000, minDelayMs: 10, maxDelayMs: 20, onWait: (ms) => waits.push(ms) }
    );
    assert.equal(value, 'ok');
    assert.equal(calls, 3);
    assert.equal(waits.length, 2);
    assert.ok(waits.every((ms) => ms >= 5 && ms <= 20));
  });

  it('passes any other error at once, and a lasting quota as a CloudQuotaError with the vendor message', async () => {
    let calls = 0;
    await assert.rejects(
      withQuotaBackoff('vendor', quota, () => (calls++, Promise.reject(new Error('500 boom'))), { maxWaitMs: 5000 }),
      /500 boom/
    );
    assert.equal(calls, 1);
    const lasting = withQuotaBackoff('vendor', quota, () => Promise.reject(new Error('429 account quota 10')), {
      maxWaitMs: 50,
      minDelayMs: 10,
      maxDelayMs: 20,
    });
    await assert.rejects(lasting, (err: unknown) => {
      assert.ok(err instanceof CloudQuotaError);
      assert.equal(err.vendorMessage, 'account quota 10');
      assert.match(err.message, /^vendor: quota or rate limit, still refused after waiting \d+ s: account quota 10$/);
      return true;
    });
    assert.equal(quotaMaxWaitMs({ ROLLOUT_CLOUD_QUOTA_WAIT_SEC: '2' }), 2000);
    assert.throws(() => quotaMaxWaitMs({ ROLLOUT_CLOUD_QUOTA_WAIT_SEC: 'soon' }), /ROLLOUT_CLOUD_QUOTA_WAIT_SEC/);
  });

  it('refuses a lasting quota at once, with the vendor message', async () => {
    let calls = 0;
    const lasting = (err: unknown) => (err instanceof Error && err.message.startsWith('403 ') ? err.message : null);
    const err = await withQuotaBackoff(
      'vendor',
      quota,
      () => (calls++, Promise.reject(new Error('403 Snapshot quota exceeded. Maximum allowed: 30'))),
      { maxWaitMs: 60_000, lasting }
    ).catch((e: unknown) => e);
    assert.ok(err instanceof CloudQuotaError);
    assert.match(err.message, /^vendor: a quota that waiting does not clear .*: 403 Snapshot quota exceeded/);
    assert.equal(calls, 1, 'not waited on');
  });

  it("fits a task's size to Fly's guests: rounded up within each CPU kind's rules, or refused naming the field", () => {
    assert.deepEqual(flyGuestSize({ cpus: 1, memoryMb: 512 }, 'shared'), { cpus: 1, memoryMb: 512 });
    assert.deepEqual(flyGuestSize({ cpus: 1, memoryMb: 4096 }, 'shared'), { cpus: 2, memoryMb: 4096 });
    assert.deepEqual(flyGuestSize({ cpus: 4, memoryMb: 512 }, 'shared'), { cpus: 4, memoryMb: 1024 });
    assert.deepEqual(flyGuestSize({ cpus: 3, memoryMb: 1000 }, 'shared'), { cpus: 4, memoryMb: 1024 });
    assert.deepEqual(flyGuestSize({ cpus: 0.5, memoryMb: 300 }, 'shared'), { cpus: 1, memoryMb: 512 });
    assert.deepEqual(flyGuestSize({ cpus: 1, memoryMb: 4000 }, 'performance'), { cpus: 1, memoryMb: 4096 });
    assert.deepEqual(flyGuestSize({ cpus: 2, memoryMb: 1024 }, 'performance'), { cpus: 2, memoryMb: 4096 });
    assert.deepEqual(flyGuestSize({ cpus: 16, memoryMb: 2048 }, 'shared'), {
      field: 'cpus',
      message: "16 CPUs: Fly's shared-CPU guests have at most 8",
    });
    assert.equal((flyGuestSize({ cpus: 8, memoryMb: 20_000 }, 'shared') as { field: string }).field, 'memory');
    const { warning } = fittedGuest('fly', { cpus: 2, memoryMb: 4096 }, { cpus: 1, memoryMb: 4096 });
    assert.match(warning ?? '', /rounded up to 2 CPU, 4096 MiB/);
    assert.equal(fittedGuest('fly', { cpus: 1, memoryMb: 512 }, { cpus: 1, memoryMb: 512 }).warning, null);
  });

  it('refuses E2B template sizes E2B refuses: CPUs 1 or even up to 32, memory even', () => {
    assert.ok(E2BSettingsSchema.safeParse({ cpu_count: 2, memory_mb: 1024 }).success);
    assert.ok(E2BSettingsSchema.safeParse({ cpu_count: 1 }).success);
    assert.match(JSON.stringify(E2BSettingsSchema.safeParse({ cpu_count: 3 }).error), /1 or an even number/);
    assert.ok(!E2BSettingsSchema.safeParse({ cpu_count: 64 }).success);
    assert.match(JSON.stringify(E2BSettingsSchema.safeParse({ memory_mb: 1025 }).error), /divisible by 2/);
  });

  it("labels a trial's sandbox and reads the labels back, dotted or snake-cased", () => {
    const request = { jobName: 'j', trialId: 'j/t1', workerId: 'host-a~1' };
    const dotted = sandboxLabels(owner, request);
    assert.deepEqual(dotted, {
      'rollout.deployment': 'dep-1',
      'rollout.host': 'host-a',
      'rollout.job': 'j',
      'rollout.trial': 'j/t1',
      'rollout.worker': 'host-a~1',
    });
    const snake = sandboxLabels(owner, { ...request, role: 'verifier' }, 'snake');
    assert.equal(snake.rollout_role, 'verifier');
    assert.deepEqual(rolloutLabels({ ...snake, other: 'x' }, 'snake'), { ...dotted, 'rollout.role': 'verifier' });
    assert.deepEqual(heldSandbox(owner, 'id1', rolloutLabels(snake, 'snake')), {
      id: 'id1',
      trialId: 'j/t1',
      workerId: null,
    });
    assert.equal(heldSandbox({ ...owner, deployment: 'other' }, 'id1', dotted), null, "another deployment's");
    assert.equal(heldSandbox(owner, 'id1', {}), null, 'not Rollout');
    assert.equal(sandboxLifetimeSec(100), 700);
    assert.equal(sandboxLifetimeSec(undefined), 3600);
  });

  it("removes a trial's sandboxes by label (its role's only, when given) and lists the deployment's for the janitor", async () => {
    const labelsOf = (trialId: string, role?: 'verifier', deployment = owner.deployment) => ({
      ...sandboxLabels({ ...owner, deployment }, { jobName: 'j', trialId, workerId: 'w', ...(role ? { role } : {}) }),
    });
    const sandboxes: ListedSandbox[] = [
      { id: 'a', labels: labelsOf('j/t1') },
      { id: 'b', labels: labelsOf('j/t1', 'verifier') },
      { id: 'c', labels: labelsOf('j/t2') },
      { id: 'd', labels: labelsOf('j/t1', undefined, 'other') },
      { id: 'e', labels: { 'rollout.deployment': owner.deployment } },
    ];
    const listing = {
      list: (labels: Record<string, string>) =>
        Promise.resolve(
          sandboxes.filter((sandbox) => Object.entries(labels).every(([k, v]) => sandbox.labels?.[k] === v))
        ),
      remove: (id: string) => {
        sandboxes.splice(
          sandboxes.findIndex((sandbox) => sandbox.id === id),
          1
        );
        return Promise.resolve();
      },
    };
    assert.deepEqual(
      (await heldSandboxes(listing, owner)).map(({ id, trialId }) => `${id}:${trialId}`),
      ['a:j/t1', 'b:j/t1', 'c:j/t2'],
      'only trial sandboxes of this deployment'
    );
    assert.equal(await removeTrialSandboxes(listing, owner, 'j/t1', 'verifier'), 1);
    assert.deepEqual(
      sandboxes.map(({ id }) => id),
      ['a', 'c', 'd', 'e']
    );
    assert.equal(await removeTrialSandboxes(listing, owner, 'j/t1'), 1);
    assert.deepEqual(
      sandboxes.map(({ id }) => id),
      ['c', 'd', 'e']
    );
  });

  it("writes Modal tags within Modal's tag rule and reads them back whole; a filter never matches a longer value", () => {
    const labels = { 'rollout.trial': 'job-1/task__agent__1', 'rollout.image': 'ghcr.io/x/y:1.0', note: 'é ü 🙂 a_b' };
    const long = { 'rollout.trial': `job/${'t'.repeat(200)}` };
    for (const given of [labels, long]) {
      const tags = modalTags(given);
      for (const [name, value] of Object.entries(tags)) {
        assert.match(name, /^[A-Za-z0-9._-]{1,63}$/);
        assert.match(value, /^[A-Za-z0-9._-]{1,63}$/);
      }
      assert.deepEqual(labelsOfModalTags(tags), given);
    }
    assert.deepEqual(modalTags({ 'rollout.trial': 'a/b_c' }), { 'rollout.trial': 'a_.b__c' });
    assert.deepEqual(Object.keys(modalTags(long)), [
      'rollout.trial.4.0',
      'rollout.trial.4.1',
      'rollout.trial.4.2',
      'rollout.trial.4.3',
    ]);
    // A value 63 characters long and a longer one sharing its start carry different tag names.
    assert.equal('rollout.trial' in modalTags({ 'rollout.trial': `${'x'.repeat(63)}y` }), false);
  });

  it('max_sandboxes caps the trials a job runs at once, and is refused when not a positive integer', () => {
    const parse = (environment: Record<string, unknown>) =>
      JobConfigSchema.safeParse({
        n_concurrent_trials: 8,
        environment,
        agents: [{ name: 'oracle' }],
        datasets: [{ path: 'tasks' }],
      });
    const parsed = parse({ type: 'docker', max_sandboxes: 3 });
    assert.ok(parsed.success, JSON.stringify(parsed.error?.issues));
    const job = { ...parsed.data, name: 'n', jobs_dir: 'jobs', file: 'job.yaml' } as ResolvedJob;
    const plan = { jobDir: '/tmp/j', trials: [] } as unknown as JobPlan;
    assert.equal(jobInput(job, plan).concurrency, 3);
    assert.equal(
      jobInput({ ...job, environment: { ...job.environment, max_sandboxes: undefined } }, plan).concurrency,
      8
    );
    const refused = parse({ type: 'docker', max_sandboxes: 0 });
    assert.ok(!refused.success);
    assert.deepEqual(refused.error.issues[0]?.path, ['environment', 'max_sandboxes']);
  });
});
