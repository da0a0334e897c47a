import { stat } from 'node:fs/promises';
import path from 'node:path';

import { ifPresent } from '../files/absent';

/** Whether a task's environment/ folder holds a Dockerfile to build. */
export async function hasDockerfileIn(environmentDir: string): Promise<boolean> {
  return (await ifPresent(stat(path.join(environmentDir, 'Dockerfile'))))?.isFile() ?? false;
}
