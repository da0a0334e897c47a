import path from 'node:path';

import { CONTAINER_PATHS } from '../src/agents/agent';
import { readReward } from '../src/trial/reward';
import type { EnvironmentHandle, Rewards, TrialSpec } from '../src/trial/types';
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

      const read = await environment.exec(handle, {
        command: [
          `cd "${logs}/verifier"`,
          `if [ -f reward.txt ]; then echo txt; cat reward.txt; elif [ -f reward.json ]; then echo json; cat reward.json; else echo none; fi`,
        ].join('; '),
        signal,
      });
      const [kind, ...rest] = read.stdout.split('\n');
      const content = rest.join('\n');
      const reward = readReward(kind === 'txt' ? { txt: content } : kind === 'json' ? { json: content } : {});
      if ('error' in reward) {
        await log(spec, 'verify', `${reward.error}: ${reward.message}`);
        throw taskFailure(reward.error, reward.message);
      }
      await log(spec, 'verify', `rewards ${JSON.stringify(reward.rewards)}`);
      return reward.rewards;
    });
  };
}
