/** The `e2b` SDK, loaded on first use (its undici and Connect clients cost start-up time every other command saves). */
import type * as E2B from 'e2b';

let loaded: typeof E2B | undefined;

export function sdk(): typeof E2B {
  // eslint-disable-next-line @typescript-eslint/no-require-imports -- loaded on first use (see above)
  loaded ??= require('e2b') as typeof E2B;
  return loaded;
}

export type { Sandbox, CommandHandle, CommandResult } from 'e2b';
