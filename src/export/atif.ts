/** `--format atif`: each trial's ATIF trajectory as one line, the trial's reward and names under `extra.rollout`. */
import type { ExportFormat } from './format';
import { trialMetadata } from './format';
import { readTrajectory } from './sources';

export const atifRows: ExportFormat = async function* (trial) {
  const trajectory = await readTrajectory(trial);
  if (!trajectory) return;
  yield `${JSON.stringify({ ...trajectory, extra: { ...trajectory.extra, rollout: trialMetadata(trial) } })}\n`;
};
