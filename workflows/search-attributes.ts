/**
 * Custom search attributes set on every Job and Trial workflow, so trials can be listed and filtered in the
 * Temporal UI and with `temporal workflow list --query 'RolloutJob="my-job" AND RolloutStatus="errored"'`.
 * Pure definitions: workflows import this file.
 */
import { defineSearchAttributeKey, SearchAttributeType } from '@temporalio/common';

export const RolloutJob = defineSearchAttributeKey('RolloutJob', SearchAttributeType.KEYWORD);
export const RolloutTask = defineSearchAttributeKey('RolloutTask', SearchAttributeType.KEYWORD);
export const RolloutAgent = defineSearchAttributeKey('RolloutAgent', SearchAttributeType.KEYWORD);
export const RolloutDataset = defineSearchAttributeKey('RolloutDataset', SearchAttributeType.KEYWORD);
export const RolloutAttempt = defineSearchAttributeKey('RolloutAttempt', SearchAttributeType.INT);
export const RolloutStatus = defineSearchAttributeKey('RolloutStatus', SearchAttributeType.KEYWORD);
export const RolloutReward = defineSearchAttributeKey('RolloutReward', SearchAttributeType.DOUBLE);

export const ROLLOUT_SEARCH_ATTRIBUTES = [
  RolloutJob,
  RolloutTask,
  RolloutAgent,
  RolloutDataset,
  RolloutAttempt,
  RolloutStatus,
  RolloutReward,
] as const;
