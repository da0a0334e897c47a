/**
 * Errors a user sees before anything runs. Every problem names the file and the field, one line each, so a user
 * can fix a whole job in one pass.
 */
export interface Problem {
  file: string;
  field?: string;
  message: string;
}

export function formatProblem(problem: Problem): string {
  return problem.field
    ? `${problem.file}: ${problem.field}: ${problem.message}`
    : `${problem.file}: ${problem.message}`;
}

export class InputError extends Error {
  constructor(readonly problems: Problem[]) {
    super(problems.map(formatProblem).join('\n'));
    this.name = 'InputError';
  }
}

/** Unknown keys of one mapping listed one per line; beyond these they are counted (a file may hold 200,000). */
export const UNKNOWN_KEYS_LISTED = 20;

/** Zod issues as problems of one file: the field is the dotted path of the offending key. */
export function zodProblems(
  file: string,
  issues: readonly { path: readonly PropertyKey[]; message: string; code?: string; keys?: readonly string[] }[]
): Problem[] {
  return issues.flatMap((issue) => {
    const base = issue.path.map(String).join('.');
    if (issue.code === 'unrecognized_keys' && issue.keys) {
      const listed: Problem[] = issue.keys
        .slice(0, UNKNOWN_KEYS_LISTED)
        .map((key) => ({ file, field: base ? `${base}.${key}` : key, message: 'unknown key' }));
      const rest = issue.keys.length - listed.length;
      if (rest > 0) listed.push({ file, field: base || undefined, message: `and ${rest} more unknown keys` });
      return listed;
    }
    return [{ file, field: base || undefined, message: issue.message }];
  });
}

/**
 * Longest text (an error message, a stack) that goes into a Temporal payload. Build output or a daemon's message can
 * be one line of megabytes, and a payload over the server's limit (2 MB) fails the workflow task itself.
 */
export const PAYLOAD_TEXT_MAX = 16 * 1024;

/** `text` within `max` characters: its start and, most useful for build output, its end, with the cut said. */
export function capText(text: string, max = PAYLOAD_TEXT_MAX): string {
  if (text.length <= max) return text;
  const head = Math.floor(max / 4);
  const tail = max - head - 100;
  return `${text.slice(0, head)}\n… ${text.length - head - tail} characters cut …\n${text.slice(-tail)}`;
}
