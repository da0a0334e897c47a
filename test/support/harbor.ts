/** Harbor's own ATIF validator (PyPI `harbor`, installed by scripts/setup-tests.sh into .venv-harbor), as an oracle. */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';

import { REPO_ROOT } from './temporal';

const PYTHON = path.join(REPO_ROOT, '.venv-harbor', 'bin', 'python');

/** Validates a trajectory file: exit code 0 when Harbor accepts it, and the validator's output either way. */
export function validateWithHarbor(file: string): Promise<{ code: number; output: string }> {
  if (!existsSync(PYTHON)) throw new Error(`${PYTHON} missing: run bash scripts/setup-tests.sh`);
  return new Promise((resolve) => {
    execFile(PYTHON, ['-m', 'harbor.utils.trajectory_validator', file], { timeout: 120_000 }, (err, stdout, stderr) => {
      const code = err ? (typeof err.code === 'number' ? err.code : 1) : 0;
      resolve({ code, output: `${stdout}${stderr}` });
    });
  });
}
