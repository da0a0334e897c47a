/**
 * Multi-step tasks (Harbor's `[[steps]]`): the task as one step sees it. The environment is the task's and is shared
 * by every step; the instruction, solution and tests are the step's, and the step's [steps.agent] / [steps.verifier]
 * keys override the task's [agent] / [verifier] (unset ones fall back), so the execute and verify steps run a step
 * exactly as they run a single-step task.
 */
import path from 'node:path';

import type { Task } from './load';
import type { StepConfig, TaskConfig } from '../contracts/task-config';

/** The view of `task` for its step `name`; the task itself when it has no steps (name null). */
export function taskAtStep(task: Task, name: string | null | undefined): Task {
  if (!name) return task;
  const index = task.steps.findIndex((step) => step.name === name);
  const step = task.steps[index];
  const config = task.config.steps?.[index];
  if (!step || !config) throw new Error(`${task.dir}: task.toml has no step "${name}"`);
  return {
    ...task,
    config: stepTaskConfig(task.config, config),
    instruction: step.instruction,
    hasSolution: step.hasSolution,
    solutionDir: path.join(step.dir, 'solution'),
    testsDirs: step.testsDirs,
  };
}

/**
 * The task's config with a step's keys applied, as Harbor resolves them: timeouts, users and networks override; the
 * verifier env is the task's with the step's on top; collect hooks and artifacts are the task's then the step's. The
 * verifier mode is the step's explicit mode, else separate when the step has a [steps.verifier.environment], else the
 * task's; a separate verifier runs in the step's environment, else the task's verifier environment, else the task's.
 */
export function stepTaskConfig(task: TaskConfig, step: StepConfig): TaskConfig {
  const defined = <T extends object>(table: T): Partial<T> =>
    Object.fromEntries(Object.entries(table).filter(([, value]) => value !== undefined)) as Partial<T>;
  const { env, collect, environment, environment_mode, ...verifierKeys } = step.verifier;
  return {
    ...task,
    agent: { ...task.agent, ...defined(step.agent) },
    verifier: {
      ...task.verifier,
      ...defined(verifierKeys),
      env: { ...task.verifier.env, ...env },
      collect: [...task.verifier.collect, ...collect],
      environment_mode: environment_mode ?? (environment ? 'separate' : task.verifier.environment_mode),
      environment: environment ?? task.verifier.environment,
    },
    artifacts: [...task.artifacts, ...step.artifacts],
  };
}
