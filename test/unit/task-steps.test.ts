/**
 * Multi-step tasks (task.toml `[[steps]]`) as files and config: loading Harbor's steps/<name>/ layout and its input
 * errors, a step's view of the task (its keys over the task's), min_reward and the reward strategies.
 */
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, it } from 'node:test';

import { loadTask } from '../../src/task/load';
import { TaskConfigSchema } from '../../src/contracts/task-config';
import { stepTaskConfig, taskAtStep } from '../../src/task/steps';
import { minRewardShortfall, multiStepRewards } from '../../src/trial/step-rewards';
import type { Rewards } from '../../src/contracts/trial';

async function multiStepTask(toml: string, files: Record<string, string>): Promise<string> {
  const dir = await mkdtemp(path.join(tmpdir(), 'rollout-steps-'));
  for (const [file, text] of Object.entries({ 'task.toml': toml, ...files })) {
    await mkdir(path.dirname(path.join(dir, file)), { recursive: true });
    await writeFile(path.join(dir, file), text);
  }
  return dir;
}

const TWO_STEPS = '[[steps]]\nname = "one"\n[[steps]]\nname = "two"\n';

describe('multi-step tasks: loading', () => {
  it("loads Harbor's layout: no root instruction, each step's instruction, solution and tests over the shared ones", async () => {
    const dir = await multiStepTask(TWO_STEPS, {
      'tests/helpers.sh': '',
      'steps/one/instruction.md': 'First.',
      'steps/one/solution/solve.sh': 'true',
      'steps/one/tests/test.sh': 'true',
      'steps/two/instruction.md': 'Second.',
      'tests/test.sh': 'true',
    });
    const { task, problems } = await loadTask(dir);
    assert.deepEqual(problems, []);
    assert.ok(task);
    assert.equal(task.instruction, 'First.');
    assert.deepEqual(
      task.steps.map((step) => [step.name, step.instruction, step.hasSolution]),
      [
        ['one', 'First.', true],
        ['two', 'Second.', false],
      ]
    );
    const one = taskAtStep(task, 'one');
    assert.deepEqual(one.testsDirs, [path.join(dir, 'tests'), path.join(dir, 'steps', 'one', 'tests')]);
    assert.equal(one.solutionDir, path.join(dir, 'steps', 'one', 'solution'));
    const two = taskAtStep(task, 'two');
    assert.equal(two.instruction, 'Second.');
    assert.equal(two.hasSolution, false);
    assert.deepEqual(two.testsDirs, [path.join(dir, 'tests')]);
    assert.throws(() => taskAtStep(task, 'three'), /no step "three"/);
    assert.equal(taskAtStep(task, undefined), task);
  });

  it("names each step's missing instruction or test.sh, and refuses duplicate or unsafe step names", async () => {
    const dir = await multiStepTask(TWO_STEPS, { 'steps/one/tests/test.sh': 'true', 'steps/two/instruction.md': 'x' });
    const { problems } = await loadTask(dir);
    assert.deepEqual(
      problems.map((problem) => [path.relative(dir, problem.file), problem.message]),
      [
        ['steps/one/instruction.md', 'missing'],
        ['steps/two/tests/test.sh', "missing (every step needs its tests/test.sh or the task's tests/test.sh)"],
      ]
    );
    const duplicate = await loadTask(await multiStepTask('[[steps]]\nname = "a"\n[[steps]]\nname = "a"\n', {}));
    assert.deepEqual(
      [duplicate.problems[0]?.field, duplicate.problems[0]?.message],
      ['steps', 'step names must be unique']
    );
    const unsafe = await loadTask(await multiStepTask('[[steps]]\nname = "../up"\n', {}));
    assert.equal(unsafe.problems[0]?.field, 'steps.0.name');
    assert.match(unsafe.problems[0]?.message ?? '', /a step name is the name of its folder/);
    const badStrategy = await loadTask(await multiStepTask(`multi_step_reward_strategy = "max"\n${TWO_STEPS}`, {}));
    assert.equal(badStrategy.problems[0]?.field, 'multi_step_reward_strategy');
  });
});

describe('multi-step tasks: a step over the task', () => {
  it("takes the step's keys over the task's, and the task's where the step sets none", () => {
    const config = TaskConfigSchema.parse({
      agent: { timeout_sec: 100, user: 'agent' },
      verifier: { timeout_sec: 50, env: { A: 'task', B: 'task' } },
      artifacts: ['/app/a'],
      steps: [
        {
          name: 'one',
          agent: { timeout_sec: 10, network_mode: 'no-network' },
          verifier: { env: { B: 'step' }, user: 'checker' },
          artifacts: ['/app/b'],
        },
        { name: 'two', verifier: { environment: { docker_image: 'verifier:1' } } },
      ],
    });
    const one = stepTaskConfig(config, config.steps![0]!);
    assert.deepEqual(one.agent, { timeout_sec: 10, user: 'agent', network_mode: 'no-network' });
    assert.equal(one.verifier.timeout_sec, 50);
    assert.equal(one.verifier.user, 'checker');
    assert.deepEqual(one.verifier.env, { A: 'task', B: 'step' });
    assert.deepEqual(
      one.artifacts.map((artifact) => artifact.source),
      ['/app/a', '/app/b']
    );
    assert.equal(one.verifier.environment_mode, undefined);
    // Harbor: a step's [steps.verifier.environment] makes its verifier separate.
    const two = stepTaskConfig(config, config.steps![1]!);
    assert.equal(two.verifier.environment_mode, 'separate');
    assert.equal(two.verifier.environment?.docker_image, 'verifier:1');
  });
});

describe('multi-step tasks: min_reward and the reward strategies', () => {
  it('gates on reward for a number, on each named key for a table; a missing key or no rewards is -inf', () => {
    assert.equal(minRewardShortfall({ reward: 1 }, 1), null);
    assert.equal(minRewardShortfall({ reward: 0.5 }, 1), 'reward = 0.5 is below min_reward 1');
    assert.equal(minRewardShortfall(null, 0), 'reward = -Infinity is below min_reward 0');
    assert.equal(minRewardShortfall({ a: 1, b: 0.4 }, { a: 1, b: 0.5 }), 'b = 0.4 is below min_reward 0.5');
    assert.equal(minRewardShortfall({ a: 1 }, { b: 0 }), 'b = -Infinity is below min_reward 0');
  });

  it('mean: per key over the steps with rewards (missing keys 0); final: the last step as it is', () => {
    const steps: (Rewards | null)[] = [{ reward: 1, style: 1 }, null, { reward: 0 }];
    assert.deepEqual(multiStepRewards('mean', steps), { reward: 0.5, style: 0.5 });
    assert.deepEqual(multiStepRewards(undefined, steps), { reward: 0.5, style: 0.5 });
    assert.deepEqual(multiStepRewards('final', steps), { reward: 0 });
    assert.equal(multiStepRewards('final', [{ reward: 1 }, null]), null);
    assert.equal(multiStepRewards('mean', [null, null]), null);
    assert.equal(multiStepRewards('mean', []), null);
  });
});
