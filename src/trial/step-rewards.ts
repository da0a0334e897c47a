/**
 * Multi-step trials (Harbor's `[[steps]]`): when to stop after a step (`min_reward`) and the trial's reward from its
 * steps' (`multi_step_reward_strategy`). Pure: the Trial workflow runs it.
 */
import type { MinReward, MultiStepRewardStrategy, Rewards } from '../contracts/trial';

/**
 * Why a step's rewards fall short of its `min_reward`, or null when they meet it. A number gates on `reward`; a table
 * on each key it names. A missing key, or no rewards at all (the verifier failed), counts as -inf.
 */
export function minRewardShortfall(rewards: Rewards | null, minReward: MinReward): string | null {
  const thresholds = typeof minReward === 'number' ? { reward: minReward } : minReward;
  for (const [key, threshold] of Object.entries(thresholds)) {
    const actual = rewards?.[key] ?? -Infinity;
    if (actual < threshold) return `${key} = ${actual} is below min_reward ${threshold}`;
  }
  return null;
}

/**
 * The trial's rewards from the rewards of the steps that ran, in order (null: the step has none). `final`: the last
 * step's, as they are. `mean` (the default): per key, the mean over the steps that have rewards, a key a step lacks
 * counting 0; null when no step has any.
 */
export function multiStepRewards(
  strategy: MultiStepRewardStrategy | null | undefined,
  stepRewards: (Rewards | null)[]
): Rewards | null {
  if (strategy === 'final') return stepRewards.at(-1) ?? null;
  const graded = stepRewards.filter((rewards): rewards is Rewards => rewards !== null);
  const keys = [...new Set(graded.flatMap((rewards) => Object.keys(rewards)))].sort();
  if (keys.length === 0) return null;
  return Object.fromEntries(
    keys.map((key) => [key, graded.reduce((sum, rewards) => sum + (rewards[key] ?? 0), 0) / graded.length])
  );
}
