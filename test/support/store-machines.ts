/**
 * Machines of the object-store tests (test/e2e/e2e.storage.test.ts): the CLI and each worker a separate process with its
 * own working folder and HOME, sharing no path with the others, only the object store and the Temporal server; and
 * what those tests read of the bucket.
 */
import type { ChildProcess } from 'node:child_process';
import { spawn } from 'node:child_process';
import { cp, mkdir } from 'node:fs/promises';
import path from 'node:path';

import { temporal } from '@temporalio/proto';

import { hostCacheDir } from '../../src/host-cache';
import { workflowBundle } from '../../workers/workflow-bundle';
import { CLI, cliEnv } from './cli';
import type { TestStore } from './minio';
import { TEST_SERVER, testTemporal } from './temporal';
import { waitFor } from './wait';

export interface Machine {
  name: string;
  /** Its working folder and HOME (nothing else of the machine is shared with the CLI's). */
  dir: string;
  home: string;
  env: Record<string, string>;
}

/** The team's ROLLOUT_SECRET_KEY (base64 of 32 bytes), the same on every machine of a test. */
const TEAM_SECRET_KEY = Buffer.alloc(32, 7).toString('base64');

export async function machine(root: string, name: string, env: Record<string, string>): Promise<Machine> {
  const dir = path.join(root, name);
  const home = path.join(dir, 'home');
  await mkdir(home, { recursive: true });
  // Machines of one team share ROLLOUT_SECRET_KEY (docs/security.md): workers verify the job files the CLI signed.
  const shared = { ROLLOUT_SECRET_KEY: TEAM_SECRET_KEY };
  return { name, dir, home, env: { ...shared, ...env, HOME: home, XDG_CACHE_HOME: '', ROLLOUT_CACHE_DIR: '' } };
}

/** Worker machines, each with a copy of the workflow bundle in its own cache (else each builds it: CPU, not I/O). */
export async function workerMachines(root: string, names: string[], env: Record<string, string>): Promise<Machine[]> {
  const bundleCache = path.join(hostCacheDir(), 'workflow-bundles');
  await workflowBundle();
  const machines = await Promise.all(names.map((name) => machine(root, name, env)));
  for (const m of machines) {
    await cp(bundleCache, path.join(m.home, '.cache', 'rollout', 'workflow-bundles'), { recursive: true });
  }
  return machines;
}

export interface RunningWorker {
  machine: Machine;
  hostId: string;
  child: ChildProcess;
  log: () => string;
}

/** `rollout worker` on a machine, serving `environments` with at most `maxTrials` trials at once. */
export function startWorker(m: Machine, environments = ['local'], maxTrials = 4): RunningWorker {
  const hostId = `${m.name}-${TEST_SERVER.port}`;
  const env = cliEnv(m.env);
  // Unset, not empty: the host cache then lies under this machine's HOME.
  delete env.XDG_CACHE_HOME;
  delete env.ROLLOUT_CACHE_DIR;
  const child = spawn(
    process.execPath,
    [
      CLI,
      'worker',
      '--env',
      ...environments,
      '--max-trials',
      String(maxTrials),
      '--host-id',
      hostId,
      '--log-level',
      'warn',
    ],
    { cwd: m.dir, env: { ...env, ROLLOUT_HOST_ID: hostId } }
  );
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  return { machine: m, hostId, child, log: () => output };
}

/** Stops the workers still running (SIGTERM) and waits for them to exit. */
export async function stopWorkers(workers: RunningWorker[]): Promise<void> {
  const running = workers.filter((worker) => worker.child.exitCode === null && worker.child.signalCode === null);
  const exited = running.map((worker) => new Promise((resolve) => worker.child.once('exit', resolve)));
  for (const worker of running) worker.child.kill('SIGTERM');
  await Promise.all(exited);
}

/** Waits until every one of `workers` polls `queue` for activities (a worker's identity ends in its pid). */
export async function waitUntilPolling(workers: RunningWorker[], queue: string): Promise<void> {
  const { connection } = await testTemporal();
  try {
    await waitFor(
      `${workers.length} workers polling ${queue}`,
      async () => {
        const { pollers } = await connection.workflowService.describeTaskQueue({
          namespace: 'default',
          taskQueue: { name: queue },
          taskQueueType: temporal.api.enums.v1.TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
        });
        const polling = new Set(pollers?.map((poller) => poller.identity?.split('/').pop()));
        return workers.every((worker) => polling.has(String(worker.child.pid)));
      },
      120_000
    );
  } finally {
    await connection.close();
  }
}

/** The trial folders under `prefix` (a job's, ending in /) in a bucket: trial name → { key → size } of its objects. */
export async function trialFolders(
  store: TestStore,
  bucket: string,
  prefix: string
): Promise<Map<string, Map<string, number>>> {
  const folders = new Map<string, Map<string, number>>();
  for (const [key, size] of await store.objects(bucket, prefix)) {
    const relative = key.slice(prefix.length);
    const slash = relative.indexOf('/');
    if (slash === -1) continue;
    const trial = relative.slice(0, slash);
    if (!folders.has(trial)) folders.set(trial, new Map());
    folders.get(trial)!.set(relative.slice(slash + 1), size);
  }
  return folders;
}

export async function readObject(store: TestStore, bucket: string, key: string): Promise<string> {
  const { GetObjectCommand } = await import('@aws-sdk/client-s3');
  const response = await store.client.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
  return response.Body!.transformToString();
}
