/**
 * A worker's own caps (worker.yaml `max_*`) on each trial it starts: what the job planned is re-checked against them
 * and against this host's memory, so a job cannot raise a worker's caps.
 */
import assert from 'node:assert/strict';
import { totalmem } from 'node:os';
import { describe, it } from 'node:test';

import { loadWorkerConfig, workerCaps } from '../../src/job/worker-config';
import { hostMemoryCap } from '../../src/task/caps';
import type { CappedTrial } from '../../src/task/worker-caps';
import { DEFAULT_WORKER_CAPS, plannedCapProblems, workerCapExcess } from '../../src/task/worker-caps';
import { InputError } from '../../src/contracts/errors';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';

const GIB = 2 ** 30;

function trial(overrides: Partial<CappedTrial> = {}): CappedTrial {
  return {
    environmentType: 'docker',
    resources: { cpus: 1, memoryBytes: 2 * GIB, storageBytes: 10 * GIB, pidsLimit: 4096 },
    timeouts: { build: 600, start: 60, install: 600, execute: 600, verify: 600, collect: 60, stop: 60, cleanup: 60 },
    ...overrides,
  };
}

describe("a worker's caps on the trials it starts", () => {
  it('lets a trial within its caps run and refuses each value over them, naming the worker.yaml key', () => {
    const caps = { settings: { max_memory: '1Gi', max_cpus: 0.5, max_pids: 1000 }, source: '/etc/rollout/worker.yaml' };
    assert.deepEqual(
      workerCapExcess(trial({ resources: { cpus: 0.5, memoryBytes: GIB, storageBytes: GIB, pidsLimit: 1000 } }), caps),
      []
    );
    const excess = workerCapExcess(trial(), caps);
    assert.deepEqual(
      excess.map((over) => over.field),
      ['environment.memory', 'environment.cpus', 'environment.pids_limit']
    );
    assert.equal(
      excess[0]!.message,
      "2 GiB of memory is over this worker's cap (/etc/rollout/worker.yaml max_memory = 1 GiB)"
    );
    assert.match(
      excess[2]!.message,
      /4096 of pids is over this worker's cap \(\/etc\/rollout\/worker\.yaml max_pids = 1000\)/
    );
  });

  it("caps docker and local memory at this host's by default, whatever the job's caps said", () => {
    const huge = trial({ resources: { cpus: 1, memoryBytes: totalmem() * 2, storageBytes: GIB, pidsLimit: 100 } });
    const [over] = workerCapExcess(huge, DEFAULT_WORKER_CAPS);
    assert.equal(over?.field, 'environment.memory');
    assert.match(over.message, /by default the host memory less 10 %/);
    assert.ok(hostMemoryCap() < totalmem());
    // A sandbox in a cloud is not this host's memory: no default cap there.
    assert.deepEqual(workerCapExcess({ ...huge, environmentType: 'modal' }, DEFAULT_WORKER_CAPS), []);
  });

  it('checks the scaled timeouts and the steps, each step of a multi-step task too', () => {
    const multi = trial({
      multiStep: {
        strategy: 'mean',
        steps: [
          { name: 'one', minReward: null, timeouts: { prepare: 60, execute: 5000, verify: 60 } },
          { name: 'two', minReward: null, timeouts: { prepare: 60, execute: 60, verify: 60 } },
        ],
      },
    });
    const excess = workerCapExcess(multi, { settings: { max_timeout_sec: 3000, max_steps: 1 }, source: 'w.yaml' });
    assert.deepEqual(
      excess.map((over) => over.field),
      ['steps', 'timeouts.one.execute']
    );
    // Without max_timeout_sec, timeouts are the job's (a timeout_multiplier may scale them past a day).
    const slow = trial({ timeouts: { ...trial().timeouts, execute: 10 * 86_400 } });
    assert.deepEqual(workerCapExcess(slow, DEFAULT_WORKER_CAPS), []);
  });

  it("names the task's field, or job.yaml's override when the job replaced the task's value, once per task", () => {
    const caps = { settings: { max_memory: '1Gi' }, source: 'w.yaml' };
    const trials = [1, 2, 3].map(() => ({ ...trial(), taskDir: '/data/tasks/big' }));
    const own = plannedCapProblems(trials, caps, { file: '/jobs/job.yaml', environment: {} });
    assert.deepEqual(own, [
      {
        file: '/data/tasks/big/task.toml',
        field: 'environment.memory',
        message: "2 GiB of memory is over this worker's cap (w.yaml max_memory = 1 GiB)",
      },
    ]);
    const overridden = plannedCapProblems(trials, caps, {
      file: '/jobs/job.yaml',
      environment: { override_memory: '2G' },
    });
    assert.deepEqual(
      overridden.map((problem) => `${problem.file}: ${problem.field}`),
      ['/jobs/job.yaml: environment.override_memory']
    );
  });

  it('reads the caps from worker.yaml with the rate limits, and refuses a bad one naming the file and key', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'rollout-worker-caps-'));
    const file = path.join(dir, 'worker.yaml');
    await writeFile(file, 'max_memory: 8G\nmax_pids: 2000\n');
    const caps = workerCaps(await loadWorkerConfig(file));
    assert.deepEqual(caps, { settings: { max_memory: '8G', max_pids: 2000 }, source: file });
    await writeFile(file, 'max_pids: lots\n');
    await assert.rejects(loadWorkerConfig(file), (err: unknown) => {
      assert.ok(err instanceof InputError);
      assert.match(err.message, /worker\.yaml: max_pids: /);
      return true;
    });
  });
});
