/**
 * The SDK's clients, one per target (region), configured the SDK's own way: DAYTONA_API_KEY, DAYTONA_API_URL and
 * DAYTONA_TARGET from the worker's environment (a job's `target` key overrides the last). Sandboxes are addressed by
 * id from any worker; their SDK objects are kept per process so a trial's steps do not fetch them again.
 */
import type { Sandbox } from '@daytonaio/sdk';
import { Daytona, DaytonaError, DaytonaNotFoundError } from '@daytonaio/sdk';

import type { QuotaBackoffOptions } from '../kit/quota';
import { withQuotaBackoff } from '../kit/quota';
import { ifFoundBy } from '../kit/not-found';
import { API_KEY_VARIABLE } from './credentials';

export class DaytonaClients {
  private readonly clients = new Map<string, Daytona>();
  private readonly sandboxes = new Map<string, Sandbox>();

  /** The client of a target ('' for the environment's DAYTONA_TARGET or the account's default). */
  client(target = ''): Daytona {
    let client = this.clients.get(target);
    if (!client) {
      if (!process.env[API_KEY_VARIABLE])
        throw new Error(`${API_KEY_VARIABLE} is not set in this worker's environment`);
      client = new Daytona(target ? { target } : undefined);
      this.clients.set(target, client);
    }
    return client;
  }

  /** A sandbox's SDK object, fetched once per process. */
  async sandbox(id: string): Promise<Sandbox> {
    let sandbox = this.sandboxes.get(id);
    if (!sandbox) {
      sandbox = await daytonaCall(() => this.client().get(id));
      this.sandboxes.set(id, sandbox);
    }
    return sandbox;
  }

  remember(sandbox: Sandbox): void {
    this.sandboxes.set(sandbox.id, sandbox);
  }

  forget(id: string): void {
    this.sandboxes.delete(id);
  }
}

/**
 * The vendor's message when `err` is Daytona's answer to an account's quota (CPU, memory, disk, GPU, sandboxes,
 * snapshots: HTTP 400 or 403 "... limit exceeded") or rate limit (429); else null. For withQuotaBackoff.
 */
export function daytonaQuotaMessage(err: unknown): string | null {
  if (!(err instanceof DaytonaError)) return null;
  const quota = (err.statusCode === 400 || err.statusCode === 403) && /quota|limit exceeded/i.test(err.message);
  return err.statusCode === 429 || quota ? err.message : null;
}

/**
 * The vendor's message when `err` is a quota that waiting does not clear: the organization's snapshot quota
 * (apps/api/src/sandbox/services/snapshot.service.ts: "Snapshot quota exceeded. Maximum allowed: 30"), a per-sandbox
 * maximum (sandbox.service.ts validateOrganizationQuotas, HTTP 403: "CPU request 8 exceeds maximum allowed per
 * sandbox (4)"), or the snapshot size limit (snapshot.manager.ts: "Snapshot size (…GB) exceeds maximum allowed size
 * of 20GB"); else null. Refused at once (withQuotaBackoff's `lasting`).
 */
export function daytonaLastingQuota(err: unknown): string | null {
  if (!(err instanceof DaytonaError)) return null;
  return /snapshot quota exceeded|exceeds (the )?maximum allowed/i.test(err.message) ? err.message : null;
}

/**
 * Every Daytona API call goes through here: a rate limit (429: the SDK maps it to DaytonaRateLimitError and does not
 * retry, errors/DaytonaError.js) or a passing quota is waited on; a lasting quota is refused at once.
 */
export function daytonaCall<T>(call: () => Promise<T>, options: QuotaBackoffOptions = {}): Promise<T> {
  return withQuotaBackoff('daytona', daytonaQuotaMessage, call, { ...options, lasting: daytonaLastingQuota });
}

/**
 * A snapshot a sandbox cannot start from: missing (HTTP 400 at creation, not 404: sandbox.service.ts "Snapshot X not
 * found. Did you add it through the Daytona Dashboard?"), deactivated after 14 days unused ("Snapshot X is
 * inactive"; snapshot.manager.ts DEFAULT_SNAPSHOT_DEACTIVATION_TIMEOUT_MINUTES), or not in the sandbox's region
 * ("Snapshot X is not available in region Y"). Built or activated again, then the sandbox created again.
 */
export function isUnusableSnapshot(err: unknown): boolean {
  if (isNotFound(err)) return true;
  return (
    err instanceof DaytonaError &&
    err.statusCode === 400 &&
    /^Snapshot \S+ (not found|is inactive|is not available in region)/.test(err.message)
  );
}

/** Daytona's reply that a sandbox, session or snapshot is not there (a missing snapshot at creation: see above). */
export function isNotFound(err: unknown): boolean {
  return err instanceof DaytonaNotFoundError || (err instanceof DaytonaError && err.statusCode === 404);
}

/** The call's value, or undefined when Daytona says what it reads or removes is not there. */
export const ifFound = ifFoundBy(isNotFound);
