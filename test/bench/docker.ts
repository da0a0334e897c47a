/**
 * `npm run bench -- latency [rounds]` (4 tasks, one at a time) and `npm run bench -- throughput [rounds]` (12 tasks,
 * 4 at a time): the `rollout` CLI on the docker environment (oracle agent, default settings, its dev server already
 * up) against the floor, bare `docker` CLI commands doing the same steps per trial (run, mkdir, cp the solution in,
 * run it, cp the tests in, run them, cp the logs out, rm). Rounds interleave Rollout and the floor, so both see the
 * same load; figures are per round and their min/median, with the load average next to them. Nothing is asserted.
 *
 * The CLI talks to the dev server of ROLLOUT_TEMPORAL_PORT / ROLLOUT_STATE_DIR (started by an untimed warm-up job).
 */
import { execFile, spawn } from 'node:child_process';
import { mkdir, mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { loadavg, tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';

import { REPO_ROOT } from '../support/temporal';

const run = promisify(execFile);
const FLOOR_LABEL = 'rollout.bench-floor';
const FLOOR_REPOSITORY = 'rollout-bench-floor';

interface Shape {
  tasks: number;
  concurrency: number;
}

const SHAPES: Record<'latency' | 'throughput', Shape> = {
  latency: { tasks: 4, concurrency: 1 },
  throughput: { tasks: 12, concurrency: 4 },
};

export function dockerBenchmark(kind: 'latency' | 'throughput') {
  return async (args: string[]): Promise<void> => {
    const rounds = Number(args.find((arg) => /^\d+$/.test(arg)) ?? 5);
    const shape = SHAPES[kind];
    const dir = await mkdtemp(path.join(tmpdir(), `rollout-bench-${kind}-`));
    try {
      const tasks = await writeTasks(dir, shape.tasks);
      await buildFloorImages(tasks);
      console.error(`${kind}: warm-up (untimed): one Rollout job, one floor job`);
      await rolloutJob(dir, `warm-${kind}`, shape, false);
      await floorJob(dir, tasks, shape.concurrency);
      const figures: RoundFigures[] = [];
      for (let round = 1; round <= rounds; round++) {
        const load = loadavg()[0]!;
        const rollout = await rolloutJob(dir, `${kind}-r${round}`, shape, true);
        const floor = await floorJob(dir, tasks, shape.concurrency);
        const figure = { round, load, rollout, floor };
        figures.push(figure);
        console.log(formatRound(figure));
      }
      console.log(summary(kind, shape, figures));
    } finally {
      await removeFloorImages();
      await rm(dir, { recursive: true, force: true });
    }
  };
}

interface JobFigures {
  /** Whole process wall time, s. */
  wall: number;
  /** Per-trial latency (start → end), s, in task order. */
  trials: number[];
  /** Rollout only: CLI start → first trial's build step start, s. */
  firstBuild?: number;
  /** Rollout only: per step, the median duration over the job's trials, s. */
  steps?: Record<string, number>;
}

interface RoundFigures {
  round: number;
  load: number;
  rollout: JobFigures;
  floor: JobFigures;
}

/** perf-task-NN: a distinct image each (FROM debian:bookworm-slim + one RUN), a solution and a shell test. */
async function writeTasks(dir: string, count: number): Promise<string[]> {
  const tasks: string[] = [];
  for (let i = 1; i <= count; i++) {
    const id = String(i).padStart(2, '0');
    const task = path.join(dir, 'tasks', `perf-task-${id}`);
    for (const sub of ['environment', 'solution', 'tests']) await mkdir(path.join(task, sub), { recursive: true });
    await writeFile(
      path.join(task, 'task.toml'),
      `version = "1.0"\n[agent]\ntimeout_sec = 60.0\n[verifier]\ntimeout_sec = 60.0\n[environment]\ncpus = 1\nmemory_mb = 1024\n`
    );
    await writeFile(path.join(task, 'instruction.md'), `Write answer-${id} to /app/answer.txt.\n`);
    await writeFile(
      path.join(task, 'environment', 'Dockerfile'),
      `FROM debian:bookworm-slim\nWORKDIR /app\nRUN echo perf-task-${id} > /task-id\n`
    );
    await writeFile(path.join(task, 'solution', 'solve.sh'), `echo answer-${id} > /app/answer.txt\n`);
    await writeFile(
      path.join(task, 'tests', 'test.sh'),
      `if [ "$(cat /app/answer.txt)" = answer-${id} ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n`
    );
    tasks.push(task);
  }
  return tasks;
}

async function buildFloorImages(tasks: string[]): Promise<void> {
  for (const task of tasks) {
    await run('docker', [
      'build',
      '-q',
      '--label',
      `${FLOOR_LABEL}=1`,
      '-t',
      `${FLOOR_REPOSITORY}:${path.basename(task)}`,
      path.join(task, 'environment'),
    ]);
  }
}

async function removeFloorImages(): Promise<void> {
  const { stdout } = await run('docker', ['images', '-q', '--filter', `label=${FLOOR_LABEL}=1`]);
  const ids = [...new Set(stdout.split('\n').filter(Boolean))];
  if (ids.length) await run('docker', ['rmi', '-f', ...ids]).catch(() => undefined);
}

/** One trial of the floor, as a shell script: every step a docker CLI command, a timestamp after each. */
const FLOOR_TRIAL = `set -e
task="$1"; out="$2"; name="rollout-bench-floor-$(basename "$task")-$$"
image="${FLOOR_REPOSITORY}:$(basename "$task")"
date +%s.%N > "$out/start"
docker run -d --name "$name" --label ${FLOOR_LABEL}=1 --cpus 1 --memory 1024m \\
  -e ROLLOUT_TASK_INSTRUCTION="$(cat "$task/instruction.md")" "$image" sleep infinity > /dev/null
docker exec "$name" mkdir -p /logs/agent /logs/verifier /oracle /tests
docker cp "$task/solution/." "$name:/oracle/"
docker exec -w /app "$name" bash -c 'bash /oracle/solve.sh > /logs/agent/oracle.txt 2>&1'
docker cp "$task/tests/." "$name:/tests/"
docker exec -w /app "$name" bash -c 'bash /tests/test.sh > /logs/verifier/test-stdout.txt 2>&1'
docker cp "$name:/logs" "$out/" 
docker rm -f "$name" > /dev/null
date +%s.%N > "$out/end"
`;

async function floorJob(dir: string, tasks: string[], concurrency: number): Promise<JobFigures> {
  const script = path.join(dir, 'floor-trial.sh');
  await writeFile(script, FLOOR_TRIAL);
  const out = await mkdtemp(path.join(dir, 'floor-'));
  const started = process.hrtime.bigint();
  const queue = [...tasks];
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      for (let task = queue.shift(); task; task = queue.shift()) {
        const trialOut = path.join(out, path.basename(task));
        await mkdir(trialOut);
        await run('bash', [script, task, trialOut]);
      }
    })
  );
  const wall = Number(process.hrtime.bigint() - started) / 1e9;
  const trials: number[] = [];
  for (const task of tasks) {
    const read = async (name: string) => Number(await readFile(path.join(out, path.basename(task), name), 'utf8'));
    const reward = (
      await readFile(path.join(out, path.basename(task), 'logs', 'verifier', 'reward.txt'), 'utf8')
    ).trim();
    if (reward !== '1') throw new Error(`floor: ${task} scored ${reward}`);
    trials.push((await read('end')) - (await read('start')));
  }
  await rm(out, { recursive: true, force: true });
  return { wall, trials };
}

async function rolloutJob(dir: string, name: string, shape: Shape, timed: boolean): Promise<JobFigures> {
  const jobsDir = path.join(dir, 'jobs');
  const file = path.join(dir, `${name}.yaml`);
  await writeFile(
    file,
    [
      `name: ${name}`,
      `jobs_dir: ${jobsDir}`,
      `n_concurrent_trials: ${shape.concurrency}`,
      'environment:',
      '  type: docker',
      'agents:',
      '  - name: oracle',
      'datasets:',
      `  - path: ${path.join(dir, 'tasks')}`,
      '',
    ].join('\n')
  );
  const startedAt = Date.now();
  const started = process.hrtime.bigint();
  await new Promise<void>((resolve, reject) => {
    const child = spawn(process.execPath, [path.join(REPO_ROOT, 'bin', 'rollout.js'), file], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.once('error', reject);
    child.once('close', (code) =>
      code === 0 ? resolve() : reject(new Error(`rollout ${file} exited ${code}: ${stderr.slice(-2000)}`))
    );
  });
  const wall = Number(process.hrtime.bigint() - started) / 1e9;
  const jobDir = path.join(jobsDir, name);
  const results: TrialResultFile[] = [];
  for (const entry of await readdir(jobDir, { withFileTypes: true })) {
    if (!entry.isDirectory()) continue;
    const text = await readFile(path.join(jobDir, entry.name, 'result.json'), 'utf8').catch(() => null);
    if (text) results.push(JSON.parse(text) as TrialResultFile);
  }
  if (results.length !== shape.tasks) throw new Error(`${name}: ${results.length} of ${shape.tasks} trial results`);
  for (const result of results) {
    if (result.rewards?.reward !== 1)
      throw new Error(`${name}: ${result.trial_name} scored ${JSON.stringify(result.rewards)}`);
  }
  results.sort((a, b) => a.task_name.localeCompare(b.task_name));
  const seconds = (from: string, to: string) => (Date.parse(to) - Date.parse(from)) / 1000;
  const builds = results.map((r) => r.steps.build?.started_at).filter((t): t is string => !!t);
  const stepNames = [...new Set(results.flatMap((r) => Object.keys(r.steps)))];
  const steps = Object.fromEntries(
    stepNames.map((step) => [
      step,
      median(
        results.flatMap((r) => {
          const timing = r.steps[step];
          return timing?.finished_at ? [seconds(timing.started_at, timing.finished_at)] : [];
        })
      ),
    ])
  );
  if (!timed) return { wall, trials: [] };
  return {
    wall,
    trials: results.map((r) => seconds(r.started_at, r.finished_at)),
    firstBuild: (Math.min(...builds.map((t) => Date.parse(t))) - startedAt) / 1000,
    steps,
  };
}

interface TrialResultFile {
  trial_name: string;
  task_name: string;
  started_at: string;
  finished_at: string;
  rewards: Record<string, number> | null;
  steps: Record<string, { started_at: string; finished_at: string | null } | undefined>;
}

function median(values: number[]): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

const s = (value: number) => value.toFixed(2);

function formatRound({ round, load, rollout, floor }: RoundFigures): string {
  const trialRatio = median(rollout.trials) / median(floor.trials);
  return (
    `round ${round} (load1 ${load.toFixed(1)}): Rollout wall ${s(rollout.wall)} s, trial median ${s(median(rollout.trials))} s, ` +
    `first build ${s(rollout.firstBuild ?? NaN)} s after the CLI started | floor wall ${s(floor.wall)} s, trial median ` +
    `${s(median(floor.trials))} s | ratios: trial ${s(trialRatio)}, wall ${s(rollout.wall / floor.wall)}\n` +
    `  Rollout steps (median s): ${Object.entries(rollout.steps ?? {})
      .map(([step, value]) => `${step} ${value.toFixed(3)}`)
      .join(', ')}`
  );
}

function summary(kind: string, shape: Shape, figures: RoundFigures[]): string {
  const stat = (values: number[]) => `${s(Math.min(...values))} / ${s(median(values))}`;
  const pick = (f: (r: RoundFigures) => number) => figures.map(f);
  return [
    `${kind}: ${shape.tasks} tasks at n_concurrent_trials ${shape.concurrency}, ${figures.length} rounds (min / median), ` +
      `load1 ${stat(pick((r) => r.load))}`,
    `  job wall       Rollout ${stat(pick((r) => r.rollout.wall))} s, floor ${stat(pick((r) => r.floor.wall))} s, ` +
      `ratio per round ${stat(pick((r) => r.rollout.wall / r.floor.wall))}`,
    `  trial latency  Rollout ${stat(pick((r) => median(r.rollout.trials)))} s, floor ${stat(pick((r) => median(r.floor.trials)))} s, ` +
      `ratio per round ${stat(pick((r) => median(r.rollout.trials) / median(r.floor.trials)))}`,
    `  first build after the CLI started: ${stat(pick((r) => r.rollout.firstBuild ?? NaN))} s`,
  ].join('\n');
}
