/**
 * `npm run bench -- cloud [vendor] [trials] [--latency <ms>]`: a cloud provider on its stand-in (test/environments/<vendor>/<vendor>-stand-in.ts,
 * NOT the vendor), Rollout against the floor, the vendor's own calls a trial needs (create a sandbox from the trial's
 * image, run the solution, run the tests, delete it) through its unmodified SDK (Fly: its Machines REST API), with
 * nothing of Rollout's around them:
 * - latency: one trial at a time; Rollout's added time per trial = its median trial time − the floor's;
 * - API calls per trial: what the stand-in answered for each side's latency trials (the job's own calls included);
 * - throughput at 64 concurrent: `trials` trials (default 128) each way, trials per second.
 * Rollout runs the oracle through the CLI (its own dev server, started by an untimed warm-up job). The stand-in's own
 * cost is in both sides alike. `--latency <ms>` delays every API call of both sides (test/support/latency-proxy.ts), as
 * a vendor across the internet is. The stand-ins enforce no creation rate, so Rollout's job sets `creates_per_second`
 * out of the way (the floor is not paced either). Nothing is asserted; the figures print side by side, with the load
 * average.
 */
import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';

import { FlyApi } from '../../src/environments/fly/client';
import type { TrialResult } from '../../src/results/trial-result';
import type { CloudStandIn, CloudVendor } from '../support/cloud-stand-in';
import { delayedEnv } from '../support/latency-proxy';
import { standInStarter } from '../support/stand-in';
import { REPO_ROOT } from '../support/temporal';
import { median } from './docker';

const run = promisify(execFile);
const CONCURRENCY = 64;
const LATENCY_TRIALS = 4;
const SOLVE = 'mkdir -p /app && echo done > /app/out.txt';
const TEST = 'mkdir -p /logs/verifier && test -f /app/out.txt && echo 1 > /logs/verifier/reward.txt';

/** A vendor's own calls for one trial, as a user scripting it by hand without Rollout would make them. */
interface FloorCalls<Sandbox> {
  create(): Promise<Sandbox>;
  /** Runs a shell command in the sandbox to its end: its exit code. */
  exec(sandbox: Sandbox, command: string): Promise<number | null | undefined>;
  remove(sandbox: Sandbox): Promise<unknown>;
}

/** One floor trial: a sandbox created, the solution and the test run in it (each must exit 0), the sandbox deleted. */
type FloorTrial = () => Promise<void>;

/**
 * A vendor's floor, set up once and untimed (a user makes their template or snapshot once, from the trial's image),
 * its SDK pointed at the stand-in by the variables `npm run stand-in` prints.
 */
type Floor = (standIn: CloudStandIn, image: string) => Promise<FloorTrial>;

function floorTrial<Sandbox>(calls: FloorCalls<Sandbox>): FloorTrial {
  return async () => {
    const sandbox = await calls.create();
    try {
      for (const command of [SOLVE, TEST]) {
        const exitCode = await calls.exec(sandbox, command);
        if (exitCode !== 0) throw new Error(`floor: ${command} exited ${exitCode}`);
      }
    } finally {
      await calls.remove(sandbox);
    }
  };
}

const FLOOR_NAME = 'bench-floor';

/** Each vendor's floor: Fly's Machines REST API (it has no TypeScript SDK), the others' own SDKs, loaded here. */
const FLOORS: Record<CloudVendor, Floor> = {
  fly: (standIn, image) => {
    const api = new FlyApi(standIn.env.FLY_API_TOKEN!, standIn.env.FLY_FLAPS_BASE_URL);
    const app = standIn.env.FLY_APP!;
    const trial = floorTrial({
      create: async () => {
        const machine = await api.createMachine(app, { config: { image, init: { cmd: ['sleep', '3600'] } } });
        await api.waitFor(app, machine.id, 'started');
        return machine.id;
      },
      exec: async (id, command) => (await api.exec(app, id, { command: ['/bin/sh', '-c', command] })).exit_code,
      remove: (id) => api.destroy(app, id),
    });
    return Promise.resolve(trial);
  },
  e2b: async (_standIn, image) => {
    const { Sandbox, Template } = await import('e2b');
    await Template.build(Template().fromImage(image), FLOOR_NAME);
    return floorTrial({
      create: () => Sandbox.create(FLOOR_NAME),
      // As root, as the trial's commands run (E2B's default user cannot write /app); a non-zero exit throws.
      exec: async (sandbox, command) => (await sandbox.commands.run(command, { user: 'root' })).exitCode,
      remove: (sandbox) => sandbox.kill(),
    });
  },
  modal: async (_standIn, image) => {
    const { ModalClient } = await import('modal');
    const modal = new ModalClient();
    const app = await modal.apps.fromName(FLOOR_NAME, { createIfMissing: true });
    const built = await modal.images.fromRegistry(image).build(app);
    return floorTrial({
      create: () => modal.sandboxes.create(app, built, { command: ['sleep', 'infinity'] }),
      exec: async (sandbox, command) => (await sandbox.exec(['sh', '-c', command])).wait(),
      remove: (sandbox) => sandbox.terminate(),
    });
  },
  daytona: async (_standIn, image) => {
    const { Daytona } = await import('@daytonaio/sdk');
    const daytona = new Daytona();
    const snapshot = await daytona.snapshot.create({ name: FLOOR_NAME, image });
    return floorTrial({
      create: () => daytona.create({ snapshot: snapshot.name, user: 'root' }),
      exec: async (sandbox, command) => (await sandbox.process.executeCommand(command)).exitCode,
      remove: (sandbox) => sandbox.delete(),
    });
  },
};

/** What a stand-in's job.yaml `environment:` needs beyond `type` (the other providers' keys go here). */
const SETTINGS: Partial<Record<CloudVendor, Record<string, unknown>>> = {};

export async function cloudBenchmark(args: string[]): Promise<void> {
  const at = args.indexOf('--latency');
  const latencyMs = at >= 0 ? Number(args[at + 1]) : 0;
  if (!(Number.isInteger(latencyMs) && latencyMs >= 0))
    throw new Error(`--latency: expected whole ms, got ${args[at + 1]}`);
  const rest = at >= 0 ? [...args.slice(0, at), ...args.slice(at + 2)] : args;
  const vendor = (rest.find((arg) => !/^\d+$/.test(arg)) ?? 'fly') as CloudVendor;
  const trials = Number(rest.find((arg) => /^\d+$/.test(arg)) ?? 2 * CONCURRENCY);
  if (!Object.hasOwn(FLOORS, vendor)) throw new Error(`no floor for "${vendor}": add its calls to FLOORS`);
  const started = await standInStarter(vendor)();
  const delayed = latencyMs > 0 ? await delayedEnv(started.env, latencyMs) : null;
  // Both sides reach the stand-in through the delayed addresses.
  const standIn: CloudStandIn = Object.create(started, { env: { value: delayed?.env ?? started.env } }) as CloudStandIn;
  console.error(`cloud ${vendor}: every API call delayed ${latencyMs} ms`);
  const dir = await mkdtemp(path.join(tmpdir(), `rollout-bench-cloud-${vendor}-`));
  const image = 'debian:bookworm-slim';
  try {
    await writeTask(dir, image);
    const env = { ...process.env, ...standIn.env };
    const job = (name: string, count: number, concurrency: number) =>
      rolloutJob(dir, name, { vendor, count, concurrency, env });
    console.error(`cloud ${vendor}: warm-up (untimed)`);
    await job('warm', 1, 1);
    // The SDKs read their settings (endpoints, keys) from the environment, as a user's script would.
    Object.assign(process.env, standIn.env);
    const floor = await FLOORS[vendor](standIn, image);
    await floor();

    const load = () => loadavg()[0]!.toFixed(2);
    const callsBefore = standIn.requests();
    const rolloutLatency = await job('latency', LATENCY_TRIALS, 1);
    const rolloutCalls = (standIn.requests() - callsBefore) / LATENCY_TRIALS;
    const floorLatency: number[] = [];
    const floorBefore = standIn.requests();
    for (let i = 0; i < LATENCY_TRIALS; i++) {
      const started = Date.now();
      await floor();
      floorLatency.push((Date.now() - started) / 1000);
    }
    const floorCalls = (standIn.requests() - floorBefore) / LATENCY_TRIALS;
    const added = median(rolloutLatency.trials) - median(floorLatency);
    console.log(
      `latency (1 at a time, ${LATENCY_TRIALS} trials, load ${load()}): rollout median ${median(rolloutLatency.trials).toFixed(2)} s, ` +
        `floor median ${median(floorLatency).toFixed(2)} s: Rollout adds ${added.toFixed(2)} s per trial`
    );
    // The job's own calls (its image check, the janitor's listing) are spread over its trials.
    console.log(
      `API calls per trial: rollout ${rolloutCalls.toFixed(1)}, floor ${floorCalls.toFixed(1)}: ratio ${(rolloutCalls / floorCalls).toFixed(2)}`
    );

    const rolloutThroughput = await job('throughput', trials, CONCURRENCY);
    const started = Date.now();
    await pool(trials, CONCURRENCY, floor);
    const floorWall = (Date.now() - started) / 1000;
    console.log(
      `throughput (${trials} trials, ${CONCURRENCY} at a time, load ${load()}): rollout ${(trials / rolloutThroughput.wall).toFixed(2)} trials/s ` +
        `(${rolloutThroughput.wall.toFixed(1)} s), floor ${(trials / floorWall).toFixed(2)} trials/s (${floorWall.toFixed(1)} s): ` +
        `ratio ${(floorWall / rolloutThroughput.wall).toFixed(2)}`
    );
  } finally {
    await delayed?.close();
    await started.stop();
    await rm(dir, { recursive: true, force: true });
  }
}

/** One task whose image is `image` as is (no build): the oracle writes a file, the test checks it. */
async function writeTask(dir: string, image: string): Promise<void> {
  const task = path.join(dir, 'tasks', 'cloud-bench');
  for (const sub of ['solution', 'tests']) await mkdir(path.join(task, sub), { recursive: true });
  await writeFile(
    path.join(task, 'task.toml'),
    `version = "1.0"\n[agent]\ntimeout_sec = 120.0\n[verifier]\ntimeout_sec = 60.0\n[environment]\ndocker_image = "${image}"\n`
  );
  await writeFile(path.join(task, 'instruction.md'), 'Write /app/out.txt.\n');
  await writeFile(path.join(task, 'solution', 'solve.sh'), `#!/bin/sh\n${SOLVE}\n`);
  await writeFile(path.join(task, 'tests', 'test.sh'), `#!/bin/sh\n${TEST} || echo 0 > /logs/verifier/reward.txt\n`);
}

async function rolloutJob(
  dir: string,
  name: string,
  options: { vendor: CloudVendor; count: number; concurrency: number; env: NodeJS.ProcessEnv }
): Promise<{ wall: number; trials: number[] }> {
  const jobsDir = path.join(dir, 'jobs');
  const file = path.join(dir, `${name}.yaml`);
  const settings = Object.entries(SETTINGS[options.vendor] ?? {}).map(([k, v]) => `  ${k}: ${JSON.stringify(v)}`);
  await writeFile(
    file,
    [
      `name: bench-cloud-${name}-${process.pid}`,
      `jobs_dir: ${jobsDir}`,
      `n_attempts: ${options.count}`,
      `n_concurrent_trials: ${options.concurrency}`,
      'environment:',
      `  type: ${options.vendor}`,
      '  creates_per_second: 10000',
      ...settings,
      'agents:',
      '  - name: oracle',
      'datasets:',
      `  - path: ${path.join(dir, 'tasks')}`,
      '',
    ].join('\n')
  );
  const started = Date.now();
  await run(process.execPath, [path.join(REPO_ROOT, 'bin', 'rollout.js'), file], {
    env: options.env,
    maxBuffer: 64 * 2 ** 20,
  });
  const wall = (Date.now() - started) / 1000;
  const jobDir = path.join(jobsDir, `bench-cloud-${name}-${process.pid}`);
  const trials: number[] = [];
  for (const entry of await readdir(jobDir, { withFileTypes: true })) {
    if (!entry.isDirectory()) continue;
    const result = JSON.parse(await readFile(path.join(jobDir, entry.name, 'result.json'), 'utf8')) as TrialResult;
    if (result.rewards?.reward !== 1)
      throw new Error(`${entry.name}: ${JSON.stringify(result.error ?? result.rewards)}`);
    trials.push((Date.parse(result.finished_at) - Date.parse(result.started_at)) / 1000);
  }
  if (trials.length !== options.count) throw new Error(`${name}: ${trials.length} of ${options.count} trial results`);
  return { wall, trials };
}

async function pool(count: number, concurrency: number, work: () => Promise<void>): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < count) {
      next += 1;
      await work();
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, count) }, worker));
}
