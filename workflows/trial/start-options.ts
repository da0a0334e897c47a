/**
 * How a Trial workflow is started, for both places that start one: the Job workflow (a child) and the client
 * (a single trial, a remote rollout). Pure: the Job workflow imports it.
 */
import type { SearchAttributePair } from '@temporalio/common';

import type { TrialSpec } from '../../src/contracts/trial';
import {
  RolloutAgent,
  RolloutAttempt,
  RolloutDataset,
  RolloutJob,
  RolloutStatus,
  RolloutTask,
} from '../search-attributes';

/**
 * The id, argument, summary and search attributes of a trial's workflow. Callers add how a closed workflow with the
 * same id is treated: a Job runs a trial again when its on-disk result says so, a single trial's id is its
 * idempotency key.
 */
export function trialStartOptions(spec: TrialSpec): {
  workflowId: string;
  args: [TrialSpec];
  staticSummary: string;
  typedSearchAttributes: SearchAttributePair[];
} {
  return {
    workflowId: spec.trialId,
    args: [spec],
    staticSummary: `${spec.taskName} · ${spec.agentName} · attempt ${spec.attempt}`,
    typedSearchAttributes: [
      { key: RolloutJob, value: spec.jobName },
      { key: RolloutTask, value: spec.taskName },
      { key: RolloutAgent, value: spec.agentName },
      { key: RolloutDataset, value: spec.datasetName },
      { key: RolloutAttempt, value: spec.attempt },
      { key: RolloutStatus, value: 'running' },
    ],
  };
}
