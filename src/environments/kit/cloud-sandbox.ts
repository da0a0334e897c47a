/**
 * What every cloud sandbox provider (fly, modal, daytona, e2b) puts on its sandboxes and reads back: the labels
 * (vendor tags or metadata) that tell the janitor whose a sandbox is, and the platform-side lifetime that ends a
 * sandbox whose worker died before it could remove it.
 */
import type { EnvironmentOwner, HeldEnvironment, StartRequest } from '../../contracts/environment';
import {
  LABEL_DEPLOYMENT,
  LABEL_HOST,
  LABEL_JOB,
  LABEL_ROLE,
  LABEL_TRIAL,
  LABEL_WORKER,
} from '../../contracts/environment';

/**
 * A label's key as a vendor takes it: Rollout's own (`rollout.trial`), or with `_` for `.` where keys may hold no
 * dot (`rollout_trial`, Fly's metadata).
 */
export type LabelKeys = 'dotted' | 'snake';

export function labelKey(label: string, keys: LabelKeys = 'dotted'): string {
  return keys === 'dotted' ? label : label.replace(/\./g, '_');
}

/** Labels of a trial's sandbox: deployment, host, job, trial, worker (and role for a separate verifier's). */
export function sandboxLabels(
  owner: EnvironmentOwner,
  request: Pick<StartRequest, 'jobName' | 'trialId' | 'workerId' | 'role'>,
  keys?: LabelKeys
): Record<string, string> {
  const labels: [string, string | undefined][] = [
    [LABEL_DEPLOYMENT, owner.deployment],
    [LABEL_HOST, owner.hostId],
    [LABEL_JOB, request.jobName],
    [LABEL_TRIAL, request.trialId],
    [LABEL_WORKER, request.workerId],
    [LABEL_ROLE, request.role],
  ];
  return Object.fromEntries(
    labels.flatMap(([label, value]) => (value === undefined ? [] : [[labelKey(label, keys), value]]))
  );
}

/**
 * A listed sandbox as the janitor sees it, when it is this deployment's and a trial's (else null: another Rollout's,
 * or not Rollout's at all). Its worker is not named: any worker with credentials reaches it (not host-bound).
 */
export function heldSandbox(
  owner: EnvironmentOwner,
  id: string,
  labels: Record<string, string> | null | undefined
): HeldEnvironment | null {
  const trialId = labels?.[LABEL_TRIAL];
  if (labels?.[LABEL_DEPLOYMENT] !== owner.deployment || !trialId) return null;
  return { id, trialId, workerId: null };
}

/** A vendor's labels under Rollout's names: only Rollout's own, those the sandbox has. */
export function rolloutLabels(
  labels: Record<string, string> | null | undefined,
  keys: LabelKeys
): Record<string, string> {
  const own: Record<string, string> = {};
  for (const name of [LABEL_DEPLOYMENT, LABEL_HOST, LABEL_JOB, LABEL_TRIAL, LABEL_WORKER, LABEL_ROLE]) {
    const value = labels?.[labelKey(name, keys)];
    if (value !== undefined) own[name] = value;
  }
  return own;
}

/** Past the trial's whole budget: time for its clean-up to run first. */
const LIFETIME_SLACK_SEC = 10 * 60;
/** A sandbox started without a budget (a prebuild's, a probe's). */
const DEFAULT_LIFETIME_SEC = 60 * 60;

/**
 * How long the platform lets a trial's sandbox live (its TTL or timeout): the trial's remaining budget and some
 * slack, so a sandbox whose worker was killed cannot run up a bill for long.
 */
export function sandboxLifetimeSec(budgetSec: number | undefined): number {
  return Math.ceil(budgetSec !== undefined ? budgetSec + LIFETIME_SLACK_SEC : DEFAULT_LIFETIME_SEC);
}
