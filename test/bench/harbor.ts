/**
 * `npm run bench -- harbor [rounds] [latency|throughput]`: the same tasks through Harbor (PyPI `harbor`, the peer
 * Rollout is measured against), Rollout and the bare-docker floor, interleaved in every round, with their ratios.
 * Harbor runs from a Python ≥ 3.12 venv this bench creates once in the host cache (`harbor==HARBOR_VERSION`), on
 * Docker Compose v2 (scripts/setup.sh installs it). Where either cannot be had, it says so and exits 0.
 *
 * Harbor's own defaults apply (`--delete`: it builds and removes a per-trial image); Rollout's images are pre-built
 * like the floor's (see docker.ts). LITELLM_LOCAL_MODEL_COST_MAP keeps Harbor's litellm from fetching its cost map
 * from the network, which offline only adds retry sleeps.
 */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { readdir, rm, writeFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';

import { hostCacheDir } from '../../src/host-cache';
import type { Contender, JobFigures, Shape } from './docker';
import { SHAPES, interleavedRounds, median, rolloutJob, s, stat, timedRun, trialResults } from './docker';

const run = promisify(execFile);
/** The newest release that installs from this machine's PyPI (0.25.0 needs a newer certifi than the index has). */
const HARBOR_VERSION = '0.24.0';

export async function harborBenchmark(args: string[]): Promise<void> {
  const rounds = Number(args.find((arg) => /^\d+$/.test(arg)) ?? 2);
  const kind = args.includes('latency') ? 'latency' : 'throughput';
  const shape = SHAPES[kind];
  const missing = (await composeProblem()) ?? (await harborInstallProblem());
  if (missing) {
    console.log(`harbor: not run: ${missing}`);
    return;
  }
  const contenders: Record<string, Contender> = {
    harbor: (dir, name) => harborJob(dir, name, shape),
    rollout: (dir, name) => rolloutJob(dir, name, shape),
  };
  const figures = await interleavedRounds(`harbor-${kind}`, shape, rounds, contenders, ({ round, load, jobs }) => {
    const figure = { round, load, harbor: jobs.harbor!, rollout: jobs.rollout!, floor: jobs.floor! };
    console.log(formatRound(figure));
    return figure;
  });
  console.log(summary(kind, shape, figures));
}

interface RoundFigures {
  round: number;
  load: number;
  harbor: JobFigures;
  rollout: JobFigures;
  floor: JobFigures;
}

async function composeProblem(): Promise<string | null> {
  return run('docker', ['compose', 'version']).then(
    () => null,
    () => 'Docker Compose v2 (`docker compose`) is not installed (scripts/setup.sh installs it)'
  );
}

function venvDir(): string {
  return path.join(hostCacheDir(), 'bench', `harbor-${HARBOR_VERSION}`);
}

/** The venv marks a finished install: one interrupted halfway is made again. */
function installedMarker(): string {
  return path.join(venvDir(), '.rollout-bench-installed');
}

/** Null once `harbor` is installed in the bench's venv; else why it cannot be. */
async function harborInstallProblem(): Promise<string | null> {
  if (existsSync(installedMarker())) return null;
  const python = await findPython();
  if (!python) return 'no Python >= 3.12 here (Harbor needs one): set ROLLOUT_BENCH_PYTHON or install python3.12';
  const venv = venvDir();
  console.error(`harbor: installing harbor==${HARBOR_VERSION} into ${venv} (once)`);
  try {
    await rm(venv, { recursive: true, force: true });
    await run(python, ['-m', 'venv', venv]);
    await run(path.join(venv, 'bin', 'pip'), ['install', '-q', `harbor==${HARBOR_VERSION}`], {
      maxBuffer: 64 * 2 ** 20,
    });
    await writeFile(installedMarker(), `harbor==${HARBOR_VERSION}\n`);
    return null;
  } catch (err) {
    const output = (err as { stderr?: string }).stderr ?? (err as Error).message;
    return `pip install harbor==${HARBOR_VERSION} failed: ${output.trim().split('\n').slice(-3).join(' / ')}`;
  }
}

/** ROLLOUT_BENCH_PYTHON, else the first Python >= 3.12 on PATH or under pyenv. */
async function findPython(): Promise<string | null> {
  const pyenv = path.join(process.env.PYENV_ROOT ?? path.join(homedir(), '.pyenv'), 'versions');
  const pyenvVersions = (await readdir(pyenv).catch(() => [] as string[])).sort().reverse();
  const candidates = [
    process.env.ROLLOUT_BENCH_PYTHON,
    'python3.14',
    'python3.13',
    'python3.12',
    'python3',
    ...pyenvVersions.map((version) => path.join(pyenv, version, 'bin', 'python3')),
  ].filter((candidate): candidate is string => !!candidate);
  for (const python of candidates) {
    const ok = await run(python, ['-c', 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)']).then(
      () => true,
      () => false
    );
    if (ok) return python;
  }
  return null;
}

/** One `harbor run` of the tasks with the oracle agent; per-trial latency from its trial result files. */
async function harborJob(dir: string, name: string, shape: Shape): Promise<JobFigures> {
  const jobsDir = path.join(dir, 'harbor-jobs');
  const args = ['run', '-p', path.join(dir, 'tasks'), '-a', 'oracle', '-n', String(shape.concurrency)];
  args.push('-o', jobsDir, '--job-name', name, '--delete', '-y', '-q');
  const wall = await timedRun(path.join(venvDir(), 'bin', 'harbor'), args, {
    ...process.env,
    LITELLM_LOCAL_MODEL_COST_MAP: 'True',
  });
  const results = await trialResults<HarborTrialResult>(path.join(jobsDir, name));
  const trials = results.map((result) => {
    const reward = result.verifier_result?.rewards?.reward;
    if (reward !== 1) throw new Error(`harbor ${name}: ${result.trial_name} scored ${JSON.stringify(reward)}`);
    return (Date.parse(result.finished_at) - Date.parse(result.started_at)) / 1000;
  });
  if (trials.length !== shape.tasks)
    throw new Error(`harbor ${name}: ${trials.length} of ${shape.tasks} trial results`);
  return { wall, trials };
}

/** The fields of Harbor's trial result.json this bench reads. */
interface HarborTrialResult {
  trial_name: string;
  started_at: string;
  finished_at: string;
  verifier_result?: { rewards?: Record<string, number> | null } | null;
}

function formatRound({ round, load, harbor, rollout, floor }: RoundFigures): string {
  const trial = (figures: JobFigures) => median(figures.trials);
  return (
    `round ${round} (load1 ${load.toFixed(1)}): wall Harbor ${s(harbor.wall)} s, Rollout ${s(rollout.wall)} s, floor ` +
    `${s(floor.wall)} s | trial median Harbor ${s(trial(harbor))} s, Rollout ${s(trial(rollout))} s, floor ` +
    `${s(trial(floor))} s | Harbor/Rollout: trial ${s(trial(harbor) / trial(rollout))}, wall ` +
    `${s(harbor.wall / rollout.wall)} | Rollout/floor: trial ${s(trial(rollout) / trial(floor))}, wall ` +
    `${s(rollout.wall / floor.wall)}`
  );
}

function summary(kind: string, shape: Shape, figures: RoundFigures[]): string {
  const pick = (f: (r: RoundFigures) => number) => stat(figures.map(f));
  const trial = (figures: JobFigures) => median(figures.trials);
  return [
    `harbor ${HARBOR_VERSION} (${kind}): ${shape.tasks} tasks at ${shape.concurrency} at once, ${figures.length} ` +
      `rounds (min / median), load1 ${pick((r) => r.load)}`,
    `  job wall       Harbor ${pick((r) => r.harbor.wall)} s, Rollout ${pick((r) => r.rollout.wall)} s, floor ` +
      `${pick((r) => r.floor.wall)} s`,
    `  trial latency  Harbor ${pick((r) => trial(r.harbor))} s, Rollout ${pick((r) => trial(r.rollout))} s, floor ` +
      `${pick((r) => trial(r.floor))} s`,
    `  ratios per round: Harbor/Rollout trial ${pick((r) => trial(r.harbor) / trial(r.rollout))}, wall ` +
      `${pick((r) => r.harbor.wall / r.rollout.wall)}; Rollout/floor trial ${pick((r) => trial(r.rollout) / trial(r.floor))}, ` +
      `wall ${pick((r) => r.rollout.wall / r.floor.wall)}; Harbor/floor trial ${pick((r) => trial(r.harbor) / trial(r.floor))}`,
  ].join('\n');
}
