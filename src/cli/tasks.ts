/**
 * Task tooling for task authors and their CI. `rollout tasks check`: every task is validated, built, solved by the
 * oracle (it must score 1) and left alone by a do-nothing agent (it must not), as one Rollout job; a table says what
 * failed and why. `rollout tasks init`: a skeleton task that passes the check.
 */
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { chmod, mkdir, readdir, writeFile } from 'node:fs/promises';
import path from 'node:path';

import { environmentRequirement } from '../environments';
import { formatProblem, InputError } from '../contracts/errors';
import type { Problem } from '../contracts/errors';
import { parseJobConfig } from '../job/load';
import { jobDirOf } from '../job/plan';
import { ORACLE_AGENT } from '../contracts/job-config';
import { readJobTrials } from '../results/job-folder';
import { primaryReward } from '../results/job-stats';
import type { TrialResult } from '../results/trial-result';
import { loadDataset } from '../task/load';
import { renderTable } from './report';
import type { RunOptions } from './run';
import { runJob } from './run';

/** The agent that does nothing: a task it solves does not check the work. */
const NOP_AGENT = 'nop';

export interface CheckOptions extends Pick<RunOptions, 'hostId' | 'maxTrials'> {
  jobsDir: string;
  nConcurrent: number;
}

/** One task's verdict: a cell per stage, and the reasons of any failure. */
interface TaskCheck {
  task: string;
  valid: string;
  build: string;
  oracle: string;
  nop: string;
  failures: string[];
  /** Tagged `always-fails`: its failure is the task's point (e.g. examples/tasks/impossible, to show a reward of 0). */
  failsOnPurpose?: boolean;
}

/** The tag of a task no solution passes on purpose; its failing row says so. */
const ALWAYS_FAILS_TAG = 'always-fails';

function failsOnPurpose(metadata: Record<string, unknown>): boolean {
  return Array.isArray(metadata.tags) && metadata.tags.includes(ALWAYS_FAILS_TAG);
}

/** `rollout tasks check <path>…`: 0 when every task passes, 1 when any fails (the table says which and why). */
export async function checkTasks(paths: string[], options: CheckOptions): Promise<number> {
  const missing = paths.filter((p) => !existsSync(p));
  if (missing.length)
    throw new InputError(missing.map((file) => ({ file, message: 'no such task or dataset folder' })));

  const checks = new Map<string, TaskCheck>();
  const validDirs: string[] = [];
  const onPurpose = new Set<string>();
  for (const dataset of paths) {
    const loaded = await loadDataset(dataset, environmentRequirement({ type: 'docker' }));
    for (const task of loaded.tasks) validDirs.push(task.dir);
    for (const task of loaded.tasks) if (failsOnPurpose(task.config.metadata)) onPurpose.add(task.dir);
    for (const [dir, problems] of groupByTask(path.resolve(dataset), loaded.problems)) {
      checks.set(dir, {
        ...pending(dir),
        valid: 'invalid',
        build: '–',
        oracle: '–',
        nop: '–',
        failures: problems.map(formatProblem),
      });
    }
  }

  if (validDirs.length) {
    const job = parseJobConfig(
      {
        name: `tasks-check-${new Date().toISOString().replace(/[-:]|\.\d+Z$/g, '')}-${randomBytes(2).toString('hex')}`,
        jobs_dir: options.jobsDir,
        n_concurrent_trials: options.nConcurrent,
        environment: { type: 'docker', delete: true },
        agents: [{ name: ORACLE_AGENT }, { name: NOP_AGENT, execute: 'true' }],
        datasets: validDirs.map((dir) => ({ path: dir })),
      },
      'rollout tasks check',
      process.cwd()
    );
    await runJob(job, 'rollout tasks check', { worker: true, hostId: options.hostId, maxTrials: options.maxTrials });
    const trials = await readJobTrials(jobDirOf(job));
    for (const dir of validDirs) {
      const ofTask = trials.filter((t) => t.result?.task_dir === dir);
      const byAgent = (agent: string) => ofTask.find((t) => t.agentName === agent)?.result ?? null;
      checks.set(dir, judge(dir, byAgent(ORACLE_AGENT), byAgent(NOP_AGENT), onPurpose.has(dir)));
    }
  }

  const rows = [...checks.values()].sort((a, b) => a.task.localeCompare(b.task));
  console.log(
    renderTable([
      ['task', 'valid', 'build', 'oracle (must be 1)', 'nop (must not be 1)', 'verdict'],
      ...rows.map((r) => [r.task, r.valid, r.build, r.oracle, r.nop, r.failures.length ? 'FAIL' : 'pass']),
    ])
  );
  const failed = rows.filter((r) => r.failures.length);
  for (const row of failed) for (const failure of row.failures) console.log(`${row.task}: ${failure}`);
  const expected = failed.filter((r) => r.failsOnPurpose).length;
  const byDesign = expected ? ` (${expected} of the failing on purpose: tagged ${ALWAYS_FAILS_TAG})` : '';
  console.log(`${rows.length - failed.length} of ${rows.length} tasks pass${byDesign}`);
  return failed.length ? 1 : 0;
}

function pending(dir: string): TaskCheck {
  return {
    task: path.relative(process.cwd(), dir) || '.',
    valid: 'ok',
    build: '?',
    oracle: '?',
    nop: '?',
    failures: [],
  };
}

/** A dataset's problems by the task folder they belong to (the dataset itself when it is one task). */
function groupByTask(dataset: string, problems: Problem[]): Map<string, Problem[]> {
  const groups = new Map<string, Problem[]>();
  const singleTask = existsSync(path.join(dataset, 'task.toml'));
  for (const problem of problems) {
    const relative = path.relative(dataset, path.resolve(problem.file));
    const first = relative.split(path.sep)[0];
    const dir = singleTask || !first || first.startsWith('..') ? dataset : path.join(dataset, first);
    groups.set(dir, [...(groups.get(dir) ?? []), problem]);
  }
  return groups;
}

function judge(dir: string, oracle: TrialResult | null, nop: TrialResult | null, onPurpose: boolean): TaskCheck {
  const check = judgeStages(dir, oracle, nop);
  if (onPurpose && check.failures.length) {
    check.failsOnPurpose = true;
    check.failures = check.failures.map((failure) => `${failure} (on purpose: the task is tagged ${ALWAYS_FAILS_TAG})`);
  }
  return check;
}

function judgeStages(dir: string, oracle: TrialResult | null, nop: TrialResult | null): TaskCheck {
  const check = pending(dir);
  const buildError = [oracle, nop].map((r) => r?.error).find((e) => e?.step === 'build');
  if (buildError) {
    check.build = 'FAIL';
    check.failures.push(`build: ${buildError.type}: ${lastLines(buildError.message)}`);
    check.oracle = check.nop = '–';
    return check;
  }
  check.build = 'ok';

  const oracleReward = primaryReward(oracle?.rewards ?? null);
  check.oracle = outcome(oracle);
  if (oracleReward !== 1) {
    const why = oracle?.error
      ? `${oracle.error.type} in ${oracle.error.step}: ${lastLines(oracle.error.message)}`
      : `reward ${oracleReward ?? 'none'}`;
    check.failures.push(`oracle: must score 1, got ${why}`);
  }

  const nopReward = primaryReward(nop?.rewards ?? null);
  check.nop = outcome(nop);
  if (!nop || nop.error?.type === 'InfrastructureError') {
    check.failures.push(`nop: did not run: ${nop?.error?.message ?? 'no result'}`);
  } else if (nopReward === 1) {
    check.failures.push('nop: scores 1 without doing anything, so the tests do not check the work');
  }
  return check;
}

function outcome(result: TrialResult | null): string {
  if (!result) return 'no result';
  const reward = primaryReward(result.rewards);
  if (reward !== null) return String(reward);
  return result.error?.type ?? 'no reward';
}

function lastLines(text: string, n = 3): string {
  return text.trim().split('\n').slice(-n).join(' / ');
}

const SKELETON: Record<string, string> = {
  'task.toml': `version = "1.0"

[metadata]
author_name = ""
difficulty = "easy"
category = "programming"
tags = []

[verifier]
timeout_sec = 120.0

[agent]
timeout_sec = 600.0

[environment]
build_timeout_sec = 600.0
cpus = 1
memory = "2G"
storage = "10G"
`,
  'instruction.md': 'Create a file called /app/hello.txt with "Hello, world!" as its content.\n',
  'environment/Dockerfile': 'FROM debian:bookworm-slim\n\nWORKDIR /app\n',
  'solution/solve.sh':
    '#!/bin/bash\n# The reference solution: the oracle agent runs it, and it must score 1.\nset -euo pipefail\n\necho "Hello, world!" > /app/hello.txt\n',
  'tests/test.sh': `#!/bin/bash
# Runs in the environment after the agent; writes the reward (1 solved, 0 not) to /logs/verifier/reward.txt.
# Use absolute paths: the working directory is the image's.

if [ "$(cat /app/hello.txt 2>/dev/null)" = "Hello, world!" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
`,
};

const stepScripts = (step: string, check: string, solve: string) => ({
  [`steps/${step}/solution/solve.sh`]: `#!/bin/bash\n# Step ${step}'s reference solution (the oracle runs it).\nset -euo pipefail\n\n${solve}\n`,
  [`steps/${step}/tests/test.sh`]: `#!/bin/bash
# Runs after step ${step}'s agent; writes this step's reward to /logs/verifier/reward.txt.

if ${check}; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
`,
});

/**
 * A multi-step task (Harbor's layout: steps/<name>/ with its instruction, solution and tests), whose second step
 * builds on the first's file.
 */
const STEPS_SKELETON: Record<string, string> = {
  'task.toml': `# The trial's reward from its steps' rewards: "mean" (per key, over the steps that ran) or "final" (the last step's).
multi_step_reward_strategy = "mean"
${SKELETON['task.toml']}
[[steps]]
name = "create"
# The next step builds on this one: stop the trial here when its reward is below 1.
min_reward = 1.0

[[steps]]
name = "extend"
`,
  'environment/Dockerfile': SKELETON['environment/Dockerfile']!,
  'steps/create/instruction.md': 'Create a file called /app/hello.txt with "Hello" as its content.\n',
  ...stepScripts('create', '[ "$(cat /app/hello.txt 2>/dev/null)" = "Hello" ]', 'echo "Hello" > /app/hello.txt'),
  'steps/extend/instruction.md': 'Append a line "world" to /app/hello.txt.\n',
  ...stepScripts(
    'extend',
    '[ "$(cat /app/hello.txt 2>/dev/null)" = "$(printf \'Hello\\nworld\')" ]',
    'echo "world" >> /app/hello.txt'
  ),
};

/**
 * `rollout tasks init <dir> [--steps]`: a task (a multi-step one with --steps) that passes `rollout tasks check`; an
 * existing non-empty folder is refused.
 */
export async function initTask(dir: string, { steps = false }: { steps?: boolean } = {}): Promise<void> {
  const entries = await readdir(dir).catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT') return [];
    throw new InputError([{ file: dir, message: `cannot read it (${err.code ?? err.message})` }]);
  });
  if (entries.length) throw new InputError([{ file: dir, message: 'not empty: a task skeleton needs a new folder' }]);
  for (const [file, content] of Object.entries(steps ? STEPS_SKELETON : SKELETON)) {
    const target = path.join(dir, file);
    await mkdir(path.dirname(target), { recursive: true });
    await writeFile(target, content);
    if (file.endsWith('.sh')) await chmod(target, 0o755);
  }
  const edit = steps
    ? "task.toml's [[steps]], environment/ and steps/<name>/"
    : 'instruction.md, environment/, solution/ and tests/';
  console.log(`task skeleton in ${dir}: edit ${edit}, then`);
  console.log(`  rollout tasks check ${dir}`);
}
