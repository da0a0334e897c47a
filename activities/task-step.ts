/**
 * What runs around each step of a multi-step task (task.toml `[[steps]]`), inside its execute step, as Harbor does it:
 * the previous step's logs are taken out of the environment (into `<trial>/steps/<name>/`, so the agent of this step
 * sees neither them nor the previous tests), the step's instruction replaces the previous one, steps/<name>/workdir/
 * is copied into the working directory, its setup.sh runs there as the agent's user, and the step's healthcheck
 * must pass. Files the previous steps left in the environment stay: that is how steps build on each other.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';

import { INSTRUCTION_DIR, INSTRUCTION_FILE } from '../src/contracts/environment';
import type { Environment } from '../src/contracts/environment';
import { runHealthcheck } from '../src/environments/healthcheck';
import { trialCollectBudget } from '../src/results/collect-budget';
import { jobFiles } from '../src/results/files';
import type { Task } from '../src/task/load';
import { isDirectory, isFile } from '../src/files/absent';
import type { EnvironmentHandle, TaskStepSpec, TrialSpec } from '../src/contracts/trial';
import { taskFailure, tail } from './context';
import { log } from './secrets';
import { CONTAINER_PATHS, CONTAINER_SHELL_PATHS, LOG_FOLDERS } from '../src/contracts/paths';

/** The spec of a multi-step trial's step, by name. */
export function taskStepSpec(spec: TrialSpec, name: string): TaskStepSpec {
  const step = spec.multiStep?.steps.find((candidate) => candidate.name === name);
  if (!step) throw new Error(`trial ${spec.trialName} has no task step "${name}"`);
  return step;
}

/** Before the agent of step `task` (the task as that step sees it): see the file's comment. */
export async function startTaskStep(
  environment: Environment,
  handle: EnvironmentHandle,
  spec: TrialSpec,
  task: Task,
  name: string,
  signal: AbortSignal
): Promise<void> {
  const steps = spec.multiStep?.steps ?? [];
  const index = steps.findIndex((step) => step.name === name);
  const previous = steps[index - 1];
  if (previous) await archiveTaskStepLogs(environment, handle, spec, previous.name);
  await log(spec, 'execute', `step ${name} (${index + 1} of ${steps.length})`);

  const staging = await mkdtemp(path.join(tmpdir(), 'rollout-step-'));
  try {
    await writeFile(path.join(staging, path.basename(INSTRUCTION_FILE)), task.instruction);
    await environment.upload(handle, staging, INSTRUCTION_DIR);
  } finally {
    await rm(staging, { recursive: true, force: true });
  }

  const step = task.steps[index]!;
  const workdir = path.join(step.dir, 'workdir');
  if (!(await isDirectory(workdir))) return;
  await environment.upload(handle, workdir, handle.workdir);
  if (await isFile(path.join(workdir, 'setup.sh'))) {
    const timeoutSec = taskStepSpec(spec, name).timeouts.execute;
    const setup = await environment.exec(handle, {
      command: 'bash ./setup.sh',
      user: task.config.agent.user,
      timeoutMs: timeoutSec * 1000,
      signal,
    });
    const outcome = setup.timedOut ? `timed out after ${timeoutSec} s` : `exit ${setup.exitCode}`;
    await log(spec, 'execute', `steps/${name}/workdir/setup.sh: ${outcome}`);
    if (setup.timedOut || setup.exitCode !== 0) {
      const output = tail(`${setup.stdout}\n${setup.stderr}`.trim(), 5);
      throw taskFailure('StepSetupError', `steps/${name}/workdir/setup.sh: ${outcome}${output ? `: ${output}` : ''}`);
    }
  }
  const check = task.config.steps?.[index]?.healthcheck;
  if (check) {
    const { attempts } = await runHealthcheck(environment, handle, check, signal);
    await log(spec, 'execute', `step ${name}: healthcheck passed (attempt ${attempts}): ${check.command}`);
  }
}

/**
 * A step's /logs/agent and /logs/verifier into `<trial>/steps/<name>/` (within the job's collect limits, scrubbed of
 * secrets with the rest of the trial folder at collect), then emptied, with /tests and /logs/artifacts (collected before
 * its tests), for the next step.
 */
export async function archiveTaskStepLogs(
  environment: Environment,
  handle: EnvironmentHandle,
  spec: TrialSpec,
  name: string
): Promise<void> {
  const trialDir = jobFiles.trialDir(spec.jobDir, spec.trialName);
  const stepDir = path.join(trialDir, 'steps', name);
  const budget = await trialCollectBudget(
    trialDir,
    spec.collectLimits,
    LOG_FOLDERS.map((folder) => path.join(stepDir, folder))
  );
  for (const folder of LOG_FOLDERS) {
    await environment.download(handle, `${CONTAINER_PATHS.logs}/${folder}`, path.join(stepDir, folder), budget);
  }
  const { limit_reached: limit, cut } = budget.report();
  if (limit)
    await log(
      spec,
      'collect',
      `step ${name}: the trial's collect_max_${limit} reached, not collected: ${cut.join(', ')}`
    );
  const { logs, tests } = CONTAINER_SHELL_PATHS;
  const folders = LOG_FOLDERS.map((folder) => `"${logs}/${folder}"`).join(' ');
  // Harbor's convention folder /logs/artifacts is emptied too: each step's artifacts are its own.
  const artifacts = `"${logs}/artifacts"`;
  const emptied = await environment.exec(handle, {
    command: `find ${folders} -mindepth 1 -delete && rm -rf "${tests}" && { [ ! -d ${artifacts} ] || find ${artifacts} -mindepth 1 -delete; }`,
    user: '0',
  });
  if (emptied.exitCode !== 0) throw new Error(`could not empty ${folders}: ${emptied.stderr.trim()}`);
}
