/** The `e2b` SDK, loaded on first use (its undici and Connect clients cost start-up time every other command saves). */
import type * as E2B from 'e2b';

import { ifFoundBy } from '../kit/not-found';

let loaded: typeof E2B | undefined;

export function sdk(): typeof E2B {
  // eslint-disable-next-line @typescript-eslint/no-require-imports -- loaded on first use (see above)
  loaded ??= require('e2b') as typeof E2B;
  return loaded;
}

/**
 * E2B's reply that a sandbox or a template's tag is not there: the SDK's SandboxNotFoundError, or a TemplateError
 * carrying the API's 404 (the SDK has no class of its own for it).
 */
export function isNotFound(err: unknown): boolean {
  const { SandboxNotFoundError, TemplateError } = sdk();
  return (
    err instanceof SandboxNotFoundError || (err instanceof TemplateError && /\b404\b|not found/i.test(err.message))
  );
}

/** The call's value, or undefined when E2B says what it reads or removes is not there. */
export const ifFound = ifFoundBy(isNotFound);

export type { Sandbox, CommandHandle, CommandResult } from 'e2b';
