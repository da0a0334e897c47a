import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';

import { instructionVariable } from '../src/agents/agent';
import type { Environment } from '../src/environments/environment';
import { INSTRUCTION_DIR, INSTRUCTION_FILE, TaskEnvironmentError } from '../src/environments/environment';
import type { EnvironmentHandle, TrialSpec } from '../src/trial/types';
import type { ActivityDeps } from './context';
import { heartbeating, loadTrialTask, log, resolveWorkerEnv, taskFailure } from './context';

export interface StartInput {
  spec: TrialSpec;
  image: string;
}

export interface StartOutput {
  handle: EnvironmentHandle;
  unenforced: string[];
}

/**
 * Step 2: a fresh environment for the trial, with its resource limits, the instruction in the file
 * $ROLLOUT_TASK_INSTRUCTION_FILE and, when small enough, in $ROLLOUT_TASK_INSTRUCTION. Whatever an earlier attempt of
 * this trial left on this host is removed first.
 */
export function startEnvironment(deps: ActivityDeps) {
  return async function startEnvironment({ spec, image }: StartInput): Promise<StartOutput> {
    const task = await loadTrialTask(spec);
    try {
      const environment = deps.environment(spec.environmentType);
      const started = await heartbeating(async () => {
        const result = await environment.start({
          image,
          jobName: spec.jobName,
          trialId: spec.trialId,
          trialName: spec.trialName,
          workerId: deps.hostId,
          resources: spec.resources,
          env: {
            ...resolveWorkerEnv(task.config.environment.env),
            ...instructionVariable(task.instruction),
            ROLLOUT_TASK_INSTRUCTION_FILE: INSTRUCTION_FILE,
          },
          workdir: task.config.environment.workdir,
        });
        await uploadInstruction(environment, result.handle, task.instruction);
        return result;
      });
      const unenforced = started.unenforced.length ? ` (not enforced here: ${started.unenforced.join(', ')})` : '';
      await log(spec, 'start', `environment ${started.handle.id.slice(0, 12)} started${unenforced}`);
      return started;
    } catch (err) {
      if (err instanceof TaskEnvironmentError) throw taskFailure(err.type, err.message);
      throw err;
    }
  };
}

/** The instruction's text (validated UTF-8, so exactly the task's bytes) as INSTRUCTION_FILE. */
async function uploadInstruction(environment: Environment, handle: EnvironmentHandle, instruction: string) {
  const folder = await mkdtemp(path.join(tmpdir(), 'rollout-instruction-'));
  try {
    await writeFile(path.join(folder, path.basename(INSTRUCTION_FILE)), instruction, { mode: 0o644 });
    await environment.upload(handle, path.join(folder, path.basename(INSTRUCTION_FILE)), INSTRUCTION_DIR);
  } finally {
    await rm(folder, { recursive: true, force: true });
  }
}
