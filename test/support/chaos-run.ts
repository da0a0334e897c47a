/**
 * A job under chaos (issue 31), for the chaos benchmark and its small CI run: trials of a trivial task through the
 * simulated cloud provider (test/fixtures/providers/folder-sandbox, whose vendor answers a share of calls 429), on
 * several worker processes of which a random one is killed with SIGKILL every few seconds (and restarted), with the
 * Temporal server restarted once mid-run. What it reports is read from what the run left: the trial folders, the
 * vendor's records and call log, and a ledger the task's verifier appends to each time it runs.
 */
import type { ChildProcess } from 'node:child_process';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import path from 'node:path';

import type { Client } from '@temporalio/client';

import type { TrialResult } from '../../src/results/trial-result';
import type { JobProgress } from '../../workflows/messages';
import { createVendor } from '../fixtures/providers/folder-sandbox';
import { submitJob, writeLocalJob } from './local-job';
import { within } from './wait';

const PROVIDER = path.join(__dirname, '..', 'fixtures', 'providers', 'folder-sandbox', 'index.js');
const WORKER = path.join(__dirname, 'chaos-worker.js');

export interface ChaosOptions {
  client: Client;
  address: string;
  trials: number;
  concurrent: number;
  workers: number;
  /** How long each trial's agent holds its sandbox (a `sleep`), seconds. */
  holdSec: number;
  killEveryMs: number;
  /** Share of the vendor's calls answered 429. */
  rateLimited: number;
  createsPerSecond: number;
  /** Restarts the Temporal server (its data kept); called once, when a third of the trials finished. */
  restartServer: () => Promise<void>;
  /** Bound on the whole job. */
  timeoutMs: number;
  /** How long to wait for the sandboxes of the killed workers' attempts to go after the job ends (the reaper). */
  leakWaitMs: number;
  progress?: (line: string) => void;
}

export interface ChaosReport {
  jobName: string;
  seconds: number;
  trials: number;
  completed: number;
  errored: number;
  infrastructureErrors: number;
  /** `<trial>: <error type>: <message>` of every trial that ended with an error. */
  failures: string[];
  /** Trials with no result.json. */
  lost: number;
  /** Trials whose verifier ran twice on one sandbox, or that the job counted twice. */
  duplicated: number;
  /** Trials scored on a second sandbox after a restart (a new attempt: not a duplicate). */
  reverifiedOnFreshSandbox: number;
  sandboxesLeftAtEnd: number;
  sandboxesLeft: number;
  kills: number;
  /** Workers that exited without being killed, with the end of their stderr. */
  workerCrashes: string[];
  serverRestartSec: number;
  creates: number;
  createsPerSecond: number;
  calls: number;
  rateLimitReplies: number;
  orchestrationMs: { p50: number; p99: number };
  /** The most trials the job counted running at once (read at each progress poll). */
  peakRunning: number;
  /** The most sandboxes the vendor held at once (read every second). */
  peakHeld: number;
  workerRss: { idle: number; peak: number };
  load: { mean: number; max: number };
}

interface WorkerProcess {
  hostId: string;
  child: ChildProcess;
  /** The last 4,000 characters it wrote to stderr. */
  stderr: () => string;
}

export async function runChaosJob(options: ChaosOptions): Promise<ChaosReport> {
  const dir = await mkdtemp(path.join(tmpdir(), 'rollout-chaos-'));
  const vendor = path.join(dir, 'vendor');
  await createVendor(vendor);
  await mkdir(path.join(dir, 'leases'));
  const jobName = `chaos-${randomBytes(3).toString('hex')}`;
  const jobFile = await chaosJob(jobName, vendor, options);
  const env = {
    ...process.env,
    TEMPORAL_ADDRESS: options.address,
    MAX_TRIALS: String(Math.ceil((options.concurrent * 2) / options.workers)),
    ROLLOUT_FOLDER_SANDBOX_DIR: vendor,
    ROLLOUT_FOLDER_SANDBOX_429: String(options.rateLimited),
    ROLLOUT_LEASE_DIR: path.join(dir, 'leases'),
    TMPDIR: path.join(vendor, 'roots'),
  };
  const workers = await Promise.all(
    Array.from({ length: options.workers }, (_, n) => startWorker(`chaos-${jobName}-${n}`, env, options.progress))
  );
  const samples = new Samples(workers, vendor);
  try {
    await samples.take();
    const idle = samples.rss[0]!;
    const started = Date.now();
    const { handle, plan } = await submitJob(options.client, jobFile);
    const chaos = new Chaos(workers, env, options, handle, samples);
    const final = await within(options.timeoutMs, `job ${jobName} to finish`, chaos.run());
    const seconds = (Date.now() - started) / 1000;
    const sandboxesLeftAtEnd = await held(vendor);
    await waitForNone(vendor, options.leakWaitMs);
    const trials = await readTrials(plan.jobDir, options.holdSec);
    const verifierRuns = await ledger(path.join(vendor, 'verifier-runs.log'));
    const calls = await readCalls(path.join(vendor, 'calls.log'));
    return {
      jobName,
      seconds,
      trials: options.trials,
      completed: final.completed,
      errored: final.errored,
      infrastructureErrors: final.infrastructureErrors,
      failures: trials.failures,
      lost: options.trials - trials.results,
      duplicated: verifierRuns.twice + trials.scoredTwice + Math.max(0, final.finished - options.trials),
      reverifiedOnFreshSandbox: trials.reverified,
      sandboxesLeftAtEnd,
      sandboxesLeft: await held(vendor),
      kills: chaos.kills,
      workerCrashes: chaos.crashes,
      serverRestartSec: chaos.restartSec,
      ...calls,
      orchestrationMs: { p50: quantile(trials.orchestrationMs, 0.5), p99: quantile(trials.orchestrationMs, 0.99) },
      peakRunning: samples.peakRunning,
      peakHeld: samples.peakHeld,
      workerRss: { idle, peak: Math.max(...samples.rss) },
      load: { mean: mean(samples.load), max: Math.max(...samples.load) },
    };
  } finally {
    samples.stop();
    await Promise.all(workers.map(stopWorker));
    await rm(dir, { recursive: true, force: true });
    await rm(path.dirname(jobFile), { recursive: true, force: true });
  }
}

async function chaosJob(jobName: string, vendor: string, options: ChaosOptions): Promise<string> {
  const ledgerFile = path.join(vendor, 'verifier-runs.log');
  const jobFile = await writeLocalJob({
    name: jobName,
    attempts: options.trials,
    concurrency: options.concurrent,
    execute: `sleep ${options.holdSec}; echo ok > answer.txt`,
    // The vendor-side record of every verifier run, by sandbox.
    test:
      `echo "$ROLLOUT_ROOT" >> ${ledgerFile}\n` +
      'if [ "$(cat answer.txt)" = ok ]; then echo 1; else echo 0; fi > "$ROLLOUT_LOGS_DIR/verifier/reward.txt"\n',
  });
  // The agent's time limit (30 s in writeLocalJob's task) above its hold, however long that is.
  const taskFile = path.join(path.dirname(jobFile), 'tasks', 'trivial', 'task.toml');
  const task = await readFile(taskFile, 'utf8');
  await writeFile(
    taskFile,
    task.replace('[agent]\ntimeout_sec = 30.0', `[agent]\ntimeout_sec = ${options.holdSec + 120}.0`)
  );
  const text = await readFile(jobFile, 'utf8');
  const environment = [
    '  type: folder-sandbox',
    `  import: ${PROVIDER}`,
    `  creates_per_second: ${options.createsPerSecond}`,
  ].join('\n');
  await writeFile(jobFile, text.replace('  type: local', environment));
  return jobFile;
}

/**
 * Starts a worker process as a supervisor would (systemd, a Kubernetes Deployment): one that exits before it is
 * ready (the server it connects to just restarted, a loaded machine) is started again, a few times.
 */
async function startWorker(hostId: string, env: NodeJS.ProcessEnv, progress?: (line: string) => void) {
  for (let attempt = 1; ; attempt++) {
    try {
      return await startWorkerOnce(hostId, env);
    } catch (err) {
      if (attempt === WORKER_START_ATTEMPTS) throw err;
      progress?.(`  worker ${hostId} did not start (${(err as Error).message.slice(-500)}); starting it again`);
      await new Promise((resolve) => setTimeout(resolve, 2_000 * attempt));
    }
  }
}

const WORKER_START_ATTEMPTS = 5;

async function startWorkerOnce(hostId: string, env: NodeJS.ProcessEnv): Promise<WorkerProcess> {
  const child = spawn(process.execPath, [WORKER], {
    env: { ...env, HOST_ID: hostId },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => (stderr = (stderr + chunk.toString()).slice(-4000)));
  const ready = new Promise<WorkerProcess>((resolve, reject) => {
    child.stdout.on('data', (chunk: Buffer) => {
      if (chunk.toString().includes('ready')) resolve({ hostId, child, stderr: () => stderr });
    });
    child.on('exit', (code, signal) => reject(new Error(`worker ${hostId} exited ${code ?? signal}: ${stderr}`)));
  });
  try {
    return await within(120_000, `worker ${hostId} to start`, ready);
  } catch (err) {
    await kill(child);
    throw err;
  }
}

function exited(child: ChildProcess): boolean {
  return child.exitCode !== null || child.signalCode !== null;
}

async function kill(child: ChildProcess): Promise<void> {
  if (exited(child)) return;
  const gone = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGKILL');
  await gone;
}

async function stopWorker(worker: WorkerProcess): Promise<void> {
  if (exited(worker.child)) return;
  const gone = new Promise((resolve) => worker.child.once('exit', resolve));
  worker.child.kill('SIGTERM');
  await within(60_000, `worker ${worker.hostId} to stop`, gone).catch(() => kill(worker.child));
}

/** Kills a random worker every killEveryMs (restarting it), restarts the server once, and waits for the job. */
/** How often the job's progress is read and printed. */
const PROGRESS_EVERY_MS = 15_000;

class Chaos {
  kills = 0;
  readonly crashes: string[] = [];
  restartSec = 0;
  private finished = 0;

  constructor(
    private readonly workers: WorkerProcess[],
    private readonly env: NodeJS.ProcessEnv,
    private readonly options: ChaosOptions,
    private readonly handle: Awaited<ReturnType<typeof submitJob>>['handle'],
    private readonly samples: Samples
  ) {}

  async run(): Promise<JobProgress> {
    let done = false;
    const result = this.result().finally(() => (done = true));
    const chaos = (async () => {
      let restarted = false;
      let lastKill = Date.now();
      while (!done) {
        // Progress is read often, whatever the kill interval (a long one would leave the run silent for minutes).
        await new Promise((resolve) => setTimeout(resolve, Math.min(this.options.killEveryMs, PROGRESS_EVERY_MS)));
        if (done) break;
        await this.poll();
        if (!restarted && this.finished >= this.options.trials / 3) {
          restarted = true;
          const begun = Date.now();
          this.options.progress?.(`  restarting the Temporal server at ${this.finished} finished`);
          await this.options.restartServer();
          this.restartSec = (Date.now() - begun) / 1000;
        }
        if (Date.now() - lastKill < this.options.killEveryMs) continue;
        await this.killOne();
        lastKill = Date.now();
      }
    })();
    const [final] = await Promise.all([result, chaos]);
    return final;
  }

  private async killOne(): Promise<void> {
    await this.restartCrashed();
    const index = Math.floor(Math.random() * this.workers.length);
    const victim = this.workers[index]!;
    await kill(victim.child);
    this.kills += 1;
    this.workers[index] = await startWorker(victim.hostId, this.env, this.options.progress);
  }

  /** Workers that exited without being killed (a fault the report names) are started again, as a supervisor would. */
  private async restartCrashed(): Promise<void> {
    for (const [index, worker] of this.workers.entries()) {
      if (!exited(worker.child)) continue;
      const crash = `${worker.hostId} exited ${worker.child.exitCode ?? worker.child.signalCode}: ${worker.stderr()}`;
      this.crashes.push(crash.slice(0, 1_000));
      this.options.progress?.(`  worker ${crash}`);
      this.workers[index] = await startWorker(worker.hostId, this.env, this.options.progress);
    }
  }

  private async poll(): Promise<void> {
    const progress = (await this.handle.query('progress').catch(() => null)) as JobProgress | null;
    if (!progress) return;
    this.finished = progress.finished;
    this.samples.running(progress.running);
    this.options.progress?.(
      `  ${progress.finished}/${this.options.trials} finished, ${progress.running} running, ${this.kills} kills`
    );
  }

  /** The job's outcome; the long poll is taken up again when the server restart or a dropped connection broke it. */
  private async result(): Promise<JobProgress> {
    for (;;) {
      try {
        await this.handle.result();
        return await this.handle.query<JobProgress>('progress');
      } catch (err) {
        const description = await this.handle.describe().catch(() => null);
        if (description && description.status.name !== 'RUNNING' && description.status.name !== 'CONTINUED_AS_NEW') {
          throw err;
        }
        await new Promise((resolve) => setTimeout(resolve, 1_000));
      }
    }
  }
}

/** Worker memory (the sum of their RSS) and the load average, each second; the most trials running at once. */
class Samples {
  readonly rss: number[] = [];
  readonly load: number[] = [];
  peakRunning = 0;
  peakHeld = 0;
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly workers: WorkerProcess[],
    private readonly vendor: string
  ) {
    this.timer = setInterval(() => void this.take(), 1_000);
  }

  async take(): Promise<void> {
    let total = 0;
    for (const { child } of this.workers) {
      const status = await readFile(`/proc/${child.pid}/status`, 'utf8').catch(() => '');
      total += Number(/^VmRSS:\s+(\d+) kB/m.exec(status)?.[1] ?? 0) * 1024;
    }
    this.rss.push(total);
    this.load.push(loadavg()[0]!);
    this.peakHeld = Math.max(this.peakHeld, await held(this.vendor));
  }

  running(count: number): void {
    this.peakRunning = Math.max(this.peakRunning, count);
  }

  stop(): void {
    clearInterval(this.timer);
  }
}

async function held(vendor: string): Promise<number> {
  return (await readdir(path.join(vendor, 'sandboxes'))).length;
}

async function waitForNone(vendor: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline && (await held(vendor)) > 0) {
    await new Promise((resolve) => setTimeout(resolve, 1_000));
  }
}

interface VerifierRunLine {
  sandbox: string;
  state: string;
}

/** What the trial folders say: results written, orchestration time, verifier runs per sandbox. */
async function readTrials(jobDir: string, holdSec: number) {
  const found = {
    results: 0,
    scoredTwice: 0,
    reverified: 0,
    orchestrationMs: [] as number[],
    failures: [] as string[],
  };
  for (const entry of await readdir(jobDir, { withFileTypes: true })) {
    if (!entry.isDirectory()) continue;
    const trialDir = path.join(jobDir, entry.name);
    const text = await readFile(path.join(trialDir, 'result.json'), 'utf8').catch(() => null);
    if (!text) continue;
    found.results += 1;
    const result = JSON.parse(text) as TrialResult;
    if (result.error) found.failures.push(`${entry.name}: ${result.error.type}: ${result.error.message.slice(0, 300)}`);
    found.orchestrationMs.push(Date.parse(result.finished_at) - Date.parse(result.started_at) - holdSec * 1000);
    const runs = (await readFile(path.join(trialDir, 'verifier-runs.jsonl'), 'utf8').catch(() => ''))
      .split('\n')
      .filter(Boolean)
      .map((line) => JSON.parse(line) as VerifierRunLine)
      .filter((run) => run.state === 'started');
    const sandboxes = new Set(runs.map((run) => run.sandbox));
    if (sandboxes.size < runs.length) found.scoredTwice += 1;
    if (sandboxes.size > 1) found.reverified += 1;
  }
  return found;
}

/** Sandboxes whose verifier ran more than once, from the ledger the task's test.sh appends to. */
async function ledger(file: string): Promise<{ twice: number }> {
  const counts = new Map<string, number>();
  for (const root of (await readFile(file, 'utf8').catch(() => '')).split('\n').filter(Boolean)) {
    counts.set(root, (counts.get(root) ?? 0) + 1);
  }
  return { twice: [...counts.values()].filter((n) => n > 1).length };
}

/** The vendor's call log: creates answered, their rate over the span they took, 429 replies. */
async function readCalls(file: string) {
  const lines = (await readFile(file, 'utf8')).split('\n').filter(Boolean);
  const creates = lines.filter((line) => line.endsWith(' create 200')).map((line) => Number(line.split(' ')[0]));
  const span = creates.length > 1 ? (Math.max(...creates) - Math.min(...creates)) / 1000 : 0;
  return {
    creates: creates.length,
    createsPerSecond: span > 0 ? creates.length / span : 0,
    calls: lines.length,
    rateLimitReplies: lines.filter((line) => line.endsWith(' 429')).length,
  };
}

function quantile(values: number[], q: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
}

function mean(values: number[]): number {
  return values.reduce((sum, v) => sum + v, 0) / Math.max(1, values.length);
}
