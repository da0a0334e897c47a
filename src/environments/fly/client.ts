/**
 * Fly's Machines REST API (https://fly.io/docs/machines/api/), with `fetch`: Fly publishes no TypeScript SDK. Each
 * reply is checked against a zod schema of the fields Rollout reads (others pass). The token is FLY_API_TOKEN; the
 * API's address FLY_FLAPS_BASE_URL (flyctl's own variable), else https://api.machines.dev.
 */
import { z } from 'zod';

import { withQuotaBackoff } from '../kit/quota';
import { ifFoundBy } from '../kit/not-found';

export const DEFAULT_FLY_API = 'https://api.machines.dev';

const MachineSchema = z.looseObject({
  id: z.string(),
  name: z.string().optional(),
  state: z.string(),
  region: z.string().optional(),
  instance_id: z.string().optional(),
  config: z.looseObject({ metadata: z.record(z.string(), z.string()).nullish() }).optional(),
});
export type FlyMachine = z.infer<typeof MachineSchema>;

const ExecReplySchema = z.looseObject({
  exit_code: z.number().int().nullish(),
  exit_signal: z.number().int().nullish(),
  stdout: z.string().nullish(),
  stderr: z.string().nullish(),
});
export type FlyExecReply = z.infer<typeof ExecReplySchema>;

const AppSchema = z.looseObject({ name: z.string() });

/** What a machine runs: the fields of Fly's MachineConfig that Rollout sets. */
export interface FlyMachineConfig {
  image: string;
  env?: Record<string, string>;
  metadata?: Record<string, string>;
  guest?: { cpu_kind: string; cpus: number; memory_mb: number; gpu_kind?: string; gpus?: number };
  init?: { cmd?: string[]; entrypoint?: string[] };
  auto_destroy?: boolean;
  restart?: { policy: 'no' | 'always' | 'on-failure' };
}

/** A reply of the API other than success: its status and Fly's own message. */
export class FlyApiError extends Error {
  constructor(
    readonly status: number,
    readonly flyMessage: string,
    what: string
  ) {
    super(`fly: ${what}: HTTP ${status}: ${flyMessage}`);
    this.name = 'FlyApiError';
  }
}

/** Fly's reply that an app or machine is not there. */
export function isNotFound(err: unknown): boolean {
  return err instanceof FlyApiError && err.status === 404;
}

/** The call's value, or undefined when Fly says what it reads or removes is not there. */
export const ifFound = ifFoundBy(isNotFound);

/** Fly's message when the error is its quota or rate-limit reply (for withQuotaBackoff), else null. */
export function flyQuotaMessage(err: unknown): string | null {
  if (!(err instanceof FlyApiError)) return null;
  if (err.status === 429) return err.flyMessage;
  return /quota|rate limit|insufficient (capacity|resources)|too many/i.test(err.flyMessage) ? err.flyMessage : null;
}

export class FlyApi {
  constructor(
    private readonly token: string,
    private readonly baseUrl: string = DEFAULT_FLY_API
  ) {}

  async app(app: string): Promise<z.infer<typeof AppSchema>> {
    return AppSchema.parse(await this.call('GET', `/v1/apps/${enc(app)}`, `app ${app}`));
  }

  async createMachine(
    app: string,
    body: { name?: string; region?: string; config: FlyMachineConfig }
  ): Promise<FlyMachine> {
    return MachineSchema.parse(await this.call('POST', `/v1/apps/${enc(app)}/machines`, 'creating a machine', body));
  }

  async machine(app: string, id: string): Promise<FlyMachine> {
    return MachineSchema.parse(await this.call('GET', this.path(app, id), `machine ${id}`));
  }

  /** Machines of the app whose metadata holds every given pair (the API filters by `metadata.<key>`). */
  async machines(app: string, metadata: Record<string, string> = {}): Promise<FlyMachine[]> {
    const query = new URLSearchParams(Object.entries(metadata).map(([key, value]) => [`metadata.${key}`, value]));
    const reply = await this.call('GET', `/v1/apps/${enc(app)}/machines?${query.toString()}`, 'listing machines');
    return z.array(MachineSchema).parse(reply);
  }

  /** Waits (server side, at most 60 s a call) until the machine is in `state`. */
  async waitFor(app: string, id: string, state: 'started' | 'stopped' | 'destroyed', timeoutSec = 60): Promise<void> {
    await this.call('GET', `${this.path(app, id)}/wait?state=${state}&timeout=${timeoutSec}`, `waiting for ${id}`);
  }

  /** Runs a command in the machine to its end (Fly's exec is request/response: no stream, no stdin stream). */
  async exec(
    app: string,
    id: string,
    body: { command: string[]; stdin?: string; timeout?: number },
    signal?: AbortSignal
  ): Promise<FlyExecReply> {
    const reply = await this.call('POST', `${this.path(app, id)}/exec`, `exec in ${id}`, body, signal);
    return ExecReplySchema.parse(reply);
  }

  async stop(app: string, id: string): Promise<void> {
    await this.call('POST', `${this.path(app, id)}/stop`, `stopping ${id}`, {});
  }

  /** Destroys the machine (running or not); a machine already gone is no error. */
  async destroy(app: string, id: string): Promise<void> {
    await ifFound(this.call('DELETE', `${this.path(app, id)}?force=true`, `destroying ${id}`));
  }

  private path(app: string, id: string): string {
    return `/v1/apps/${enc(app)}/machines/${enc(id)}`;
  }

  /**
   * One API call. Fly rate-limits per action and per machine: a 429 (or a passing capacity reply) on any call is
   * waited on and the call sent again (a refused request did nothing), up to ROLLOUT_CLOUD_QUOTA_WAIT_SEC.
   */
  private call(method: string, path: string, what: string, body?: unknown, signal?: AbortSignal): Promise<unknown> {
    return withQuotaBackoff('fly', flyQuotaMessage, () => this.send(method, path, what, body, signal), {
      ...(signal ? { signal } : {}),
    });
  }

  private async send(
    method: string,
    path: string,
    what: string,
    body?: unknown,
    signal?: AbortSignal
  ): Promise<unknown> {
    const res = await fetch(`${this.baseUrl.replace(/\/+$/, '')}${path}`, {
      method,
      headers: {
        authorization: `Bearer ${this.token}`,
        ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
      },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
      ...(signal ? { signal } : {}),
    });
    const text = await res.text();
    if (!res.ok) throw new FlyApiError(res.status, errorMessage(text), what);
    return text ? (JSON.parse(text) as unknown) : null;
  }
}

/** Fly's errors are `{"error": "..."}`; anything else is shown as it came (cut). */
function errorMessage(text: string): string {
  try {
    const parsed = z.looseObject({ error: z.string() }).safeParse(JSON.parse(text));
    if (parsed.success) return parsed.data.error;
  } catch {
    // Not JSON: the text itself is the message.
  }
  return text.trim().slice(0, 500) || '(no message)';
}

function enc(segment: string): string {
  return encodeURIComponent(segment);
}
