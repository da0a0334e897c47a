/**
 * `npm run bench -- scale [trials] [--server dev|cluster|dev,cluster]`: a large job (default 10,000 trials) of a
 * trivial task on the local environment, to measure orchestration on each server kind in one run: trials/second,
 * history events and bytes per trial, server and worker CPU per trial, memory, database growth, and how often the
 * Job continued-as-new. Each kind gets a fresh server of its own (the dev server; the PostgreSQL-backed cluster of
 * scripts/temporal-cluster.sh), so figures do not depend on what earlier runs left in a database.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmod, mkdtemp, readFile, readdir, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';

import type { Client } from '@temporalio/client';

import { devServerStatus, ensureDevServer, stopDevServer } from '../../src/temporal/dev-server';
import { connectClient, ensureSearchAttributes } from '../../src/temporal/connect';
import { localWorkers, runHistoryLengths, submitJob, writeLocalJob } from '../support/local-job';
import { REPO_ROOT } from '../support/temporal'; // also quiets worker logs

type ServerKind = 'dev' | 'cluster';

/** A fresh server for one measurement: its address, the processes that are the server, where its data grows. */
interface BenchServer {
  address: string;
  pids(): Promise<number[]>;
  dataBytes(): Promise<number>;
  /** Stops and starts the server again, its data kept (as after a crash). */
  restart(): Promise<void>;
  stop(): Promise<void>;
}

/** A fresh server of this kind, on ports of its own. */
export function benchServer(kind: ServerKind): Promise<BenchServer> {
  return kind === 'dev' ? devBenchServer() : clusterBenchServer();
}

const BENCH_PORT = Number(process.env.ROLLOUT_BENCH_PORT ?? 17900);

async function devBenchServer(): Promise<BenchServer> {
  const config = {
    stateDir: await mkdtemp(path.join(tmpdir(), 'rollout-bench-dev-')),
    ip: '127.0.0.1',
    port: BENCH_PORT,
    uiPort: BENCH_PORT + 1000,
  };
  const status = await ensureDevServer(config);
  return {
    address: status.address,
    pids: async () => [(await devServerStatus(config)).pid!],
    dataBytes: () => folderBytes(config.stateDir, (name) => name.startsWith('temporal.db')),
    restart: async () => {
      await stopDevServer(config);
      await ensureDevServer(config);
    },
    stop: async () => {
      await stopDevServer(config);
      await rm(config.stateDir, { recursive: true, force: true });
    },
  };
}

async function clusterBenchServer(): Promise<BenchServer> {
  const dir = await mkdtemp(path.join(tmpdir(), 'rollout-bench-cluster-'));
  // Readable by the `postgres` user, which runs PostgreSQL when this runs as root.
  await chmod(dir, 0o755);
  const port = BENCH_PORT + 100;
  const script = (...args: string[]) =>
    promisify(execFile)(path.join(REPO_ROOT, 'scripts', 'temporal-cluster.sh'), args, {
      env: { ...process.env, ROLLOUT_CLUSTER_PORT: String(port), ROLLOUT_CLUSTER_DIR: dir },
    });
  const { stdout } = await script('up');
  const address = /TEMPORAL_ADDRESS=(\S+)/.exec(stdout)![1]!;
  const pgdata = path.join(dir, 'postgres');
  return {
    address,
    pids: async () => {
      const server = Number(await readFile(path.join(dir, 'temporal.pid'), 'utf8'));
      const postmaster = Number((await readFile(path.join(pgdata, 'postmaster.pid'), 'utf8')).split('\n')[0]);
      return [server, postmaster, ...(await childrenOf(postmaster))];
    },
    // Tables and indexes of both databases (the write-ahead log is recycled and stays bounded).
    dataBytes: () => folderBytes(path.join(pgdata, 'base'), () => true),
    restart: async () => {
      await script('stop', 'temporal');
      await script('up');
    },
    stop: async () => {
      await script('down');
      await rm(dir, { recursive: true, force: true });
    },
  };
}

export async function scaleBenchmark(args: string[]): Promise<void> {
  const serverArg = args.includes('--server') ? args[args.indexOf('--server') + 1] : 'dev,cluster';
  const kinds = (serverArg ?? '').split(',') as ServerKind[];
  if (kinds.some((kind) => kind !== 'dev' && kind !== 'cluster')) {
    throw new Error(`--server: expected dev, cluster or dev,cluster, got "${serverArg}"`);
  }
  const trials = Number(args.find((arg) => /^\d+$/.test(arg)) ?? 10_000);
  for (const kind of kinds) await measure(kind, trials);
}

async function measure(kind: ServerKind, trials: number): Promise<void> {
  console.error(`scale on the ${kind} server: starting it`);
  const server = await benchServer(kind);
  const { client, connection } = await connectClient({ address: server.address, namespace: 'default', uiUrl: null });
  await ensureSearchAttributes(connection, 'default');
  const name = `scale-${randomBytes(3).toString('hex')}`;
  const jobFile = await writeLocalJob({ name, attempts: trials, concurrency: 64 });
  const { connection: workerConnection, workers } = await localWorkers({
    hostId: `bench-${name}`,
    maxTrials: 64,
    address: server.address,
  });
  const running = Promise.all(workers.map((w) => w.run()));

  const workerRss: number[] = [];
  const serverPss: number[] = [];
  const sample = async () => {
    workerRss.push(process.memoryUsage().rss);
    serverPss.push(await memoryOf(await server.pids()));
  };
  await sample();
  const sampler = setInterval(() => void sample().catch(() => undefined), 1000);
  const dataBefore = await server.dataBytes();
  const serverCpuBefore = await cpuTicks(await server.pids());
  const workerCpuBefore = process.cpuUsage();
  const started = Date.now();
  const submittedAt = Date.now();
  const { handle, plan } = await submitJob(client, jobFile);
  // Worker memory as the job goes: flat means nothing per trial is kept.
  const rssByProgress: string[] = [];
  const progressTimer = setInterval(() => {
    handle
      .query('progress')
      .then((p) => {
        const { finished } = p as { finished: number };
        rssByProgress.push(`${finished}: ${(process.memoryUsage().rss / 2 ** 20).toFixed(0)}`);
        console.error(`  ${finished}/${trials} finished`);
      })
      .catch(() => undefined);
  }, 10_000);
  const final = await handle.result();
  const seconds = (Date.now() - started) / 1000;
  const serverCpu = ticksSince(serverCpuBefore, await cpuTicks(await server.pids())) / CLOCK_TICKS;
  const workerCpuUsage = process.cpuUsage(workerCpuBefore);
  // The worker's own children that are node (the local environment's command helper), without what they waited for
  // (the commands themselves, which were never counted).
  const helperCpu = (await ownTicks(await childrenOf(process.pid))) / CLOCK_TICKS;
  const workerCpu = (workerCpuUsage.user + workerCpuUsage.system) / 1e6 + helperCpu;
  clearInterval(sampler);
  clearInterval(progressTimer);
  for (const worker of workers) worker.shutdown();
  await running;
  await workerConnection.close();

  const firstBuild = await firstBuildStart(plan.jobDir);
  const histories = await runHistoryLengths(client, `rollout-job/${name}`);
  const events = await historyTotals(client, name);
  const dataGrowth = (await server.dataBytes()) - dataBefore;
  await connection.close();
  await server.stop();

  const mb = (bytes: number) => `${(bytes / 2 ** 20).toFixed(0)} MiB`;
  const n = final.finished;
  console.log(
    `scale on the ${kind} server: ${n}/${trials} trials in ${seconds.toFixed(1)} s = ${(n / seconds).toFixed(1)} trials/s`
  );
  console.log(
    `  completed ${final.completed}, errored ${final.errored}, infrastructure errors ${final.infrastructureErrors}`
  );
  console.log(
    `  history per trial (Trial + share of Job runs): ${(events.events / n).toFixed(1)} events, ` +
      `${(events.bytes / n / 1024).toFixed(1)} KiB; Trial alone ${(events.trialEvents / events.trials).toFixed(1)} events`
  );
  console.log(
    `  CPU per trial: server ${((serverCpu / n) * 1000).toFixed(1)} ms, worker+client ${((workerCpu / n) * 1000).toFixed(1)} ms ` +
      `(command helper ${((helperCpu / n) * 1000).toFixed(1)} ms of it; ` +
      `server ${(serverCpu / seconds).toFixed(2)} cores, worker ${(workerCpu / seconds).toFixed(2)} cores on average)`
  );
  console.log(
    `  memory: worker RSS peak ${mb(Math.max(...workerRss))} (end ${mb(workerRss[workerRss.length - 1]!)}), ` +
      `server${kind === 'cluster' ? ' + PostgreSQL' : ''} PSS peak ${mb(Math.max(...serverPss))}`
  );
  console.log(`  worker RSS (MiB) by trials finished: ${rssByProgress.join(', ')}`);
  console.log(`  first trial's build started ${((firstBuild - submittedAt) / 1000).toFixed(2)} s after submission`);
  console.log(`  database growth: ${mb(dataGrowth)} = ${(dataGrowth / n / 1024).toFixed(1)} KiB per trial`);
  console.log(
    `  Job runs: ${histories.length} (continued-as-new ${final.continuedAsNew} times), longest history ${Math.max(...histories)} events`
  );
}

/** The earliest build step start over the job's trial results (workflow time, ms). */
async function firstBuildStart(jobDir: string): Promise<number> {
  let first = Infinity;
  for (const entry of await readdir(jobDir, { withFileTypes: true })) {
    if (!entry.isDirectory()) continue;
    const text = await readFile(path.join(jobDir, entry.name, 'result.json'), 'utf8').catch(() => null);
    const started = text ? (JSON.parse(text) as { steps: { build?: { started_at: string } } }).steps.build : undefined;
    if (started) first = Math.min(first, Date.parse(started.started_at));
  }
  return first;
}

/** Sums history events and bytes of every execution of the job (Job runs and Trials), from visibility. */
export async function historyTotals(client: Client, jobName: string) {
  const totals = { events: 0, bytes: 0, trials: 0, trialEvents: 0 };
  for await (const execution of client.workflow.list({ query: `RolloutJob = "${jobName}"` })) {
    totals.events += execution.historyLength;
    totals.bytes += execution.historySize ?? 0;
    if (execution.type === 'trialWorkflow') {
      totals.trials += 1;
      totals.trialEvents += execution.historyLength;
    }
  }
  return totals;
}

// Linux reports process CPU time in clock ticks of 1/100 s (USER_HZ).
const CLOCK_TICKS = 100;

/** CPU ticks (user + system, and of waited-for children) of each process, from /proc/<pid>/stat. */
async function cpuTicks(pids: number[]): Promise<Map<number, number>> {
  const ticks = new Map<number, number>();
  for (const pid of pids) {
    const text = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => null);
    if (!text) continue; // exited since it was listed
    const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
    // After the command: state(0) … utime(11) stime(12) cutime(13) cstime(14).
    ticks.set(
      pid,
      [11, 12, 13, 14].reduce((sum, i) => sum + Number(fields[i]), 0)
    );
  }
  return ticks;
}

/** CPU of node processes among `pids` (user + system), not of the processes they waited for. */
async function ownTicks(pids: number[]): Promise<number> {
  let total = 0;
  for (const pid of pids) {
    const text = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => null);
    if (!text?.includes('(node)')) continue;
    const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
    total += Number(fields[11]) + Number(fields[12]);
  }
  return total;
}

/** CPU used since `before`: processes born since then count whole. */
function ticksSince(before: Map<number, number>, after: Map<number, number>): number {
  let total = 0;
  for (const [pid, ticks] of after) total += ticks - (before.get(pid) ?? 0);
  return total;
}

/** Proportional set size (shared pages split between sharers, as PostgreSQL's shared buffers are) of processes. */
async function memoryOf(pids: number[]): Promise<number> {
  let total = 0;
  for (const pid of pids) {
    const text = await readFile(`/proc/${pid}/smaps_rollup`, 'utf8').catch(() => '');
    total += Number(/^Pss:\s+(\d+) kB/m.exec(text)?.[1] ?? 0) * 1024;
  }
  return total;
}

async function childrenOf(parent: number): Promise<number[]> {
  const children: number[] = [];
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const text = await readFile(`/proc/${entry}/stat`, 'utf8').catch(() => '');
    if (Number(text.slice(text.lastIndexOf(')') + 2).split(' ')[1]) === parent) children.push(Number(entry));
  }
  return children;
}

async function folderBytes(dir: string, include: (name: string) => boolean): Promise<number> {
  let total = 0;
  for (const entry of await readdir(dir, { withFileTypes: true, recursive: true })) {
    if (entry.isFile() && include(entry.name)) total += (await stat(path.join(entry.parentPath, entry.name))).size;
  }
  return total;
}
