/**
 * A trial's secret values and their redaction from everything that leaves the worker: collected files (even when the
 * collect failed half-way), result.json, trial.log lines written after collect, and error messages, which Temporal
 * keeps in its history. A redaction that fails is an error, never a reason to go on unredacted.
 */
import { existsSync } from 'node:fs';
import { rm, writeFile } from 'node:fs/promises';
import path from 'node:path';

import { ApplicationFailure } from '@temporalio/activity';

import { loadAgentConfig } from '../src/agents/config';
import { resolveEnvWithSecrets } from '../src/env-vars';
import { jobFiles } from '../src/results/files';
import { restoreGatewayCalls } from '../src/results/gateway-calls';
import { scrubSecrets, SecretScrubber } from '../src/results/scrub';
import { appendTrialLog } from '../src/results/trial-log';
import { literalSecretValues, secretValuesOf } from '../src/secrets/key-names';
import type { Task } from '../src/task/load';
import type { TrialSpec } from '../src/contracts/trial';
import { loadTrialTask, trialSecretEnv } from './context';

/**
 * Every value a trial's files may hold that must not leave: the `${VAR}` values its agent and task env resolved, its
 * sealed secrets, and this worker's own secret-named variables (src/secrets/key-names.ts), referenced or not.
 */
export async function trialSecrets(spec: TrialSpec): Promise<string[]> {
  const [agent, task] = await Promise.all([loadAgentConfig(spec.jobDir, spec.agentName), loadedTask(spec)]);
  const config = task?.config;
  const envs = [agent?.env, config?.environment.env, config?.verifier.env, config?.solution.env];
  const referenced = envs.flatMap((env) => {
    if (!env) return [];
    try {
      return resolveEnvWithSecrets(env, process.env).secrets;
    } catch {
      return []; // Unset variables never reached the container: nothing of them to scrub.
    }
  });
  // Literal values of secret-named agent env (`--ae KEY=sk-…`) reach the container as they are: redacted too.
  const literal = agent.env ? literalSecretValues(agent.env) : [];
  return [...referenced, ...literal, ...sealedValues(spec), ...secretValuesOf(process.env)];
}

/**
 * The trial's task, or undefined when it does not validate (a task error): such a task never ran, so none of its env
 * reached anything to scrub, and its trial's result is still written. Any other failure is thrown.
 */
async function loadedTask(spec: TrialSpec): Promise<Task | undefined> {
  try {
    return await loadTrialTask(spec);
  } catch (err) {
    if (err instanceof ApplicationFailure && err.nonRetryable) return undefined;
    throw err;
  }
}

/**
 * Appends to the trial's trial.log with the trial's secrets redacted first: lines are written before collect (its
 * scrub covers them again), but also after it (stop, cleanup, upload, the result step) and while a trial runs, when
 * its folder may be read or uploaded. When the secrets cannot be worked out, nothing is written and the caller fails:
 * a line is never written unredacted.
 */
export async function log(spec: TrialSpec, step: string, message: string): Promise<void> {
  const scrubbed = new SecretScrubber(await trialSecrets(spec)).scrub(message);
  await appendTrialLog(spec.jobDir, spec.trialName, step, scrubbed);
}

/** Marks a trial folder whose files may hold secrets until scrubTrialFolder has run over it whole. */
const SCRUB_PENDING = '.rollout-scrub-pending';

export async function markUnscrubbed(trialDir: string): Promise<void> {
  await writeFile(path.join(trialDir, SCRUB_PENDING), '');
}

/** Redacts the trial's secrets in its whole folder, then clears the mark. Returns how many files changed. */
export async function scrubTrialFolder(spec: TrialSpec): Promise<number> {
  const trialDir = jobFiles.trialDir(spec.jobDir, spec.trialName);
  const changed = await scrubSecrets(trialDir, await trialSecrets(spec));
  await rm(path.join(trialDir, SCRUB_PENDING), { force: true });
  return changed;
}

/**
 * Before a trial folder is uploaded or its result written, what a collect that died half-way (its worker killed)
 * left undone: the gateway's records put back over the container's, the folder scrubbed. If that fails, so does
 * the caller: nothing leaves unscrubbed.
 */
export async function settleCollected(spec: TrialSpec): Promise<void> {
  const trialDir = jobFiles.trialDir(spec.jobDir, spec.trialName);
  await restoreGatewayCalls(trialDir);
  if (existsSync(path.join(trialDir, SCRUB_PENDING))) await scrubTrialFolder(spec);
}

/**
 * The activities with the secrets redacted in the message and stack of every error they throw (causes too), before
 * Temporal stores it: a trial's with its own secrets (the worker's when they cannot be worked out), others' with
 * the worker's.
 */
export function scrubbingErrors<T extends Record<string, (...args: never[]) => Promise<unknown>>>(activities: T): T {
  const wrapped = Object.entries(activities).map(([name, activity]) => [
    name,
    async (...args: Parameters<typeof activity>) => {
      try {
        return await activity(...args);
      } catch (err) {
        throw await scrubError(err, (args[0] as { spec?: TrialSpec } | undefined)?.spec);
      }
    },
  ]);
  return Object.fromEntries(wrapped) as T;
}

async function scrubError(err: unknown, spec: TrialSpec | undefined): Promise<unknown> {
  const secrets = spec
    ? await trialSecrets(spec).catch(() => [...sealedValues(spec), ...secretValuesOf(process.env)])
    : secretValuesOf(process.env);
  const scrubber = new SecretScrubber(secrets);
  for (let error = err; error instanceof Error; error = error.cause) {
    error.message = scrubber.scrub(error.message);
    if (error.stack) error.stack = scrubber.scrub(error.stack);
  }
  return err;
}

function sealedValues(spec: TrialSpec): string[] {
  try {
    return Object.values(trialSecretEnv(spec));
  } catch {
    return []; // Not unsealable here: its values cannot be in this worker's errors either.
  }
}
