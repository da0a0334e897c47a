import type { Rewards } from '../contracts/trial';

export type RewardRead =
  { rewards: Rewards } | { error: 'RewardFileNotFoundError' | 'RewardFileParseError'; message: string };

/**
 * One decimal integer or float, as the spec says: optional sign, digits with an optional fraction, an optional
 * exponent with digits. Not `Number()`, which also takes hex (`0x10`), octal, binary, `Infinity` and blank text.
 */
const DECIMAL_NUMBER = /^[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?$/;

/** Most keys and longest key of reward.json: rewards travel through Temporal and into every result file. */
const MAX_REWARD_KEYS = 1000;
const MAX_REWARD_KEY_LENGTH = 200;

/**
 * reward.txt holds one number (stored as {"reward": x}); reward.json a flat object of numbers. txt wins. `tooBig`
 * names a reward file too big to read.
 */
export function readReward(files: { txt?: string; json?: string; tooBig?: string }): RewardRead {
  if (files.tooBig !== undefined) {
    return { error: 'RewardFileParseError', message: `${files.tooBig}: too big to be a reward file` };
  }
  if (files.txt !== undefined) {
    const text = files.txt.trim();
    const value = Number(text);
    if (!DECIMAL_NUMBER.test(text) || !Number.isFinite(value)) {
      return {
        error: 'RewardFileParseError',
        message: `reward.txt: expected one number, got ${JSON.stringify(text.slice(0, 80))}`,
      };
    }
    return { rewards: { reward: value } };
  }
  if (files.json !== undefined) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(files.json);
    } catch (err) {
      return { error: 'RewardFileParseError', message: `reward.json: invalid JSON (${(err as Error).message})` };
    }
    if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) {
      return { error: 'RewardFileParseError', message: 'reward.json: expected an object of numbers' };
    }
    const entries = Object.entries(parsed);
    if (entries.length > MAX_REWARD_KEYS) {
      return { error: 'RewardFileParseError', message: `reward.json: more than ${MAX_REWARD_KEYS} rewards` };
    }
    const rewards: Rewards = {};
    for (const [key, value] of entries) {
      if (key.length > MAX_REWARD_KEY_LENGTH) {
        return {
          error: 'RewardFileParseError',
          message: `reward.json: a key longer than ${MAX_REWARD_KEY_LENGTH} characters ("${key.slice(0, 40)}…")`,
        };
      }
      if (typeof value !== 'number' || !Number.isFinite(value)) {
        return { error: 'RewardFileParseError', message: `reward.json: "${key}" is not a number` };
      }
      rewards[key] = value;
    }
    if (Object.keys(rewards).length === 0) return { error: 'RewardFileParseError', message: 'reward.json: no rewards' };
    return { rewards };
  }
  return {
    error: 'RewardFileNotFoundError',
    message: 'tests/test.sh wrote neither /logs/verifier/reward.txt nor /logs/verifier/reward.json',
  };
}
