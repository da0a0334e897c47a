import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { ifPresent } from '../../files/absent';
import { dockerfileFrontendImage, HEREDOC_LINE, SYNTAX_LINE } from './dockerfile-frontend';

/**
 * Why a build failed for want of Rollout's Dockerfile frontend (turned off with an empty ROLLOUT_DOCKERFILE_FRONTEND),
 * naming the Dockerfile line: a heredoc (the engine's own frontend reads its first line of text as an instruction) or
 * a `# syntax=` line (its frontend is not on the host, and no registry can be reached). Null when the failure is
 * something else.
 */
export async function missingFrontendProblem(contextDir: string, output: string): Promise<string | null> {
  if (dockerfileFrontendImage()) return null;
  const dockerfile = path.join(contextDir, 'Dockerfile');
  const lines = ((await ifPresent(readFile(dockerfile, 'utf8'))) ?? '').split('\n');
  const fix = "Rollout's Dockerfile frontend is turned off (ROLLOUT_DOCKERFILE_FRONTEND is empty)";
  const parseError = /dockerfile parse error line (\d+): unknown instruction/i.exec(output);
  if (parseError) {
    const failed = Number(parseError[1]);
    const heredoc = lines.slice(0, failed).findLastIndex((line) => HEREDOC_LINE.test(line));
    if (heredoc >= 0)
      return `${dockerfile}:${heredoc + 1}: a heredoc (${lines[heredoc]?.trim()}) needs BuildKit's Dockerfile 1.4 syntax; ${fix}`;
  }
  const syntax = lines.findIndex((line) => SYNTAX_LINE.test(line));
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
