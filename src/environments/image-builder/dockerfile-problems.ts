import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { ifPresent } from '../../files/absent';

/** The local image scripts/dockerfile-frontend.sh builds (ROLLOUT_DOCKERFILE_FRONTEND overrides; empty: none). */
export const DOCKERFILE_FRONTEND = 'rollout-dockerfile-frontend:1.4.3';

/**
 * Why a build failed for want of Rollout's Dockerfile frontend, naming the Dockerfile line: a heredoc (the engine's
 * own frontend reads its first line of text as an instruction) or a `# syntax=` line (its frontend is not on the host,
 * and no registry can be reached). Null when the failure is something else.
 */
export async function missingFrontendProblem(contextDir: string, output: string): Promise<string | null> {
  const dockerfile = path.join(contextDir, 'Dockerfile');
  const lines = ((await ifPresent(readFile(dockerfile, 'utf8'))) ?? '').split('\n');
  const fix = `this Docker host lacks Rollout's Dockerfile frontend (${DOCKERFILE_FRONTEND}): run scripts/setup.sh, which builds it`;
  const parseError = /dockerfile parse error line (\d+): unknown instruction/i.exec(output);
  if (parseError) {
    const failed = Number(parseError[1]);
    const heredoc = lines.slice(0, failed).findLastIndex((line) => /^\s*[A-Za-z]+\s.*<<-?\s*["']?[A-Za-z_]/.test(line));
    if (heredoc >= 0)
      return `${dockerfile}:${heredoc + 1}: a heredoc (${lines[heredoc]?.trim()}) needs BuildKit's Dockerfile 1.4 syntax; ${fix}`;
  }
  const syntax = lines.findIndex((line) => /^#\s*syntax\s*=/i.test(line));
  if (
    syntax >= 0 &&
    /failed to (resolve source metadata|solve with frontend gateway|load cache key)|pull access denied|dial tcp|no such host/i.test(
      output
    )
  ) {
    return `${dockerfile}:${syntax + 1}: ${lines[syntax]?.trim()} would pull its frontend from a registry; ${fix}`;
  }
  return null;
}
