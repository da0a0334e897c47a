import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';

import type { Environment } from '../src/environments/environment';
import { CollectBudget } from '../src/environments/host-files';

import { CONTAINER_PATHS } from '../src/agents/agent';
import { readReward } from '../src/trial/reward';
import type { EnvironmentHandle, Rewards, TrialSpec } from '../src/trial/types';

/** Largest reward file read: far above any real one (a 10 MB reward.json is fine), far below a worker's memory. */
const REWARD_FILE_MAX_BYTES = 64 * 2 ** 20;
const REWARD_FILES = ['reward.txt', 'reward.json'] as const;

/**
 * The reward files as files (copied out of the environment, not printed through an exec whose output is cut), each
 * undefined when absent. One too big to read is refused as unparsable.
 */
async function downloadRewardFiles(
  environment: Environment,
  handle: EnvironmentHandle
): Promise<{ txt?: string; json?: string; tooBig?: string }> {
  const dir = await mkdtemp(path.join(tmpdir(), 'rollout-reward-'));
  try {
    const files: Partial<Record<(typeof REWARD_FILES)[number], string>> = {};
    for (const name of REWARD_FILES) {
      const budget = new CollectBudget({ maxBytes: REWARD_FILE_MAX_BYTES, maxFiles: 1 });
      // Each into a folder of its own: a reward.txt that is a folder must not provide a reward.json.
      await environment.download(handle, `/logs/verifier/${name}`, path.join(dir, name), budget);
      if (budget.exhausted) return { tooBig: name };
      files[name] = await readFile(path.join(dir, name, name), 'utf8').catch((err: NodeJS.ErrnoException) => {
        if (err.code === 'ENOENT') return undefined; // absent, or not a regular file (a link is not followed)
        throw err;
      });
    }
    return { txt: files['reward.txt'], json: files['reward.json'] };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
import type { ActivityDeps } from './context';
import { heartbeating, loadTrialTask, log, resolveWorkerEnv, taskFailure } from './context';

export interface VerifyInput {
  spec: TrialSpec;
  handle: EnvironmentHandle;
}

/**
 * Step 5: a clean /logs/verifier (whatever the agent wrote there is removed), tests/ copied to /tests, test.sh run
 * from the working directory with its output in /logs/verifier/test-stdout.txt, then the reward read.
 */
export function runVerifier(deps: ActivityDeps) {
  return async function runVerifier({ spec, handle }: VerifyInput): Promise<Rewards> {
    const environment = deps.environment(spec.environmentType);
    const task = await loadTrialTask(spec);
    const { logs, tests } = CONTAINER_PATHS;
    return heartbeating(async (signal) => {
      const reset = await environment.exec(handle, {
        command: `rm -rf "${logs}/verifier" "${tests}" && mkdir -p "${logs}/verifier" "${tests}"`,
        user: '0',
        signal,
      });
      if (reset.exitCode !== 0) throw new Error(`could not reset /logs/verifier: ${reset.stderr.trim()}`);
      await environment.upload(handle, path.join(task.dir, 'tests'), '/tests');

      const run = await environment.exec(handle, {
        command: `bash "${tests}/test.sh" > "${logs}/verifier/test-stdout.txt" 2>&1`,
        env: resolveWorkerEnv(task.config.verifier.env),
        timeoutMs: spec.timeouts.verify * 1000,
        signal,
      });
      await log(spec, 'verify', run.timedOut ? 'tests/test.sh timed out' : `tests/test.sh exit ${run.exitCode}`);
      if (run.timedOut) throw taskFailure('VerifierTimeoutError', `tests/test.sh exceeded ${spec.timeouts.verify} s`);

      const reward = readReward(await downloadRewardFiles(environment, handle));
      if ('error' in reward) {
        await log(spec, 'verify', `${reward.error}: ${reward.message}`);
        throw taskFailure(reward.error, reward.message);
      }
      await log(spec, 'verify', `rewards ${JSON.stringify(reward.rewards)}`);
      return reward.rewards;
    });
  };
}
