/** A multi-step task's steps, run one after another in the one environment. */
import { isCancellation } from '@temporalio/workflow';

import { minRewardShortfall, multiStepRewards } from '../../src/trial/step-rewards';
import type {
  EnvironmentHandle,
  MultiStepSpec,
  StepName,
  StepTiming,
  TaskStepResult,
  TrialSpec,
} from '../../src/contracts/trial';
import { INFRASTRUCTURE_ERROR } from '../../src/contracts/trial';
import type { HostActivities } from './activities';
import type { Outcome } from './outcome';
import { classify, executeError } from './outcome';

export /**
 * A multi-step task (task.toml `[[steps]]`), as Harbor runs it: execute then verify for each step, in order, in the
 * one environment. A step that failed without rewards, or whose rewards fall short of its `min_reward`, is the last;
 * the trial's rewards come from the steps' by the task's strategy, and its error is the first step error.
 */
async function runTaskSteps(
  spec: TrialSpec,
  multiStep: MultiStepSpec,
  host: HostActivities,
  step: <T>(name: StepName, run: () => Promise<T>) => Promise<T>,
  handle: EnvironmentHandle,
  outcome: Outcome,
  steps: Partial<Record<StepName, StepTiming>>
): Promise<void> {
  const results: TaskStepResult[] = (outcome.stepResults = []);
  for (const taskStep of multiStep.steps) {
    const result: TaskStepResult = {
      name: taskStep.name,
      rewards: null,
      error: null,
      agent_exit_code: null,
      execute: null,
      verify: null,
    };
    results.push(result);
    outcome.taskStep = taskStep.name;
    const activities = host.forTaskStep(taskStep.timeouts);
    const input = { spec, handle, taskStep: taskStep.name };
    // A task error ends the step (an infrastructure one the whole run, which starts over).
    const recordError = (err: unknown, name: StepName) => {
      const error = classify(err, name);
      if (error.type === INFRASTRUCTURE_ERROR || isCancellation(err)) throw err;
      result.error ??= error;
    };
    try {
      const execution = await step('execute', () => activities.executeAgent(input)).finally(
        () => (result.execute = steps.execute ?? null)
      );
      result.agent_exit_code = outcome.agentExitCode = execution.exitCode;
      const executed = executeError(execution, taskStep.timeouts.execute);
      if (executed) result.error = executed;
      if (spec.verify) {
        try {
          result.rewards = await step('verify', () => activities.runVerifier(input));
        } catch (err) {
          recordError(err, 'verify');
        } finally {
          result.verify = steps.verify ?? null;
        }
      }
    } catch (err) {
      recordError(err, 'execute');
    }
    if (result.error) outcome.error ??= { ...result.error, message: `step ${taskStep.name}: ${result.error.message}` };
    if (result.error && !result.rewards) break;
    const shortfall =
      spec.verify && taskStep.minReward !== null ? minRewardShortfall(result.rewards, taskStep.minReward) : null;
    if (shortfall) {
      result.below_min_reward = shortfall;
      break;
    }
  }
  outcome.rewards = multiStepRewards(
    multiStep.strategy,
    results.map((result) => result.rewards)
  );
  // The trial's execute step spans every step's.
  const first = results[0]?.execute;
  if (first && steps.execute) steps.execute = { ...steps.execute, started_at: first.started_at };
}
