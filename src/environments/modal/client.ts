/**
 * Modal's SDK as the modal environment uses it: one ModalClient per worker process (credentials and server URL as the
 * SDK finds them in the worker's environment), Apps looked up once, sandbox handles kept per id, and the SDK's errors
 * told apart: gone, a quota or rate limit (waited on through the cloud providers' shared backoff, ../kit/quota.ts).
 */
import { AsyncLocalStorage } from 'node:async_hooks';

import type { App, Logger, ModalClientParams, Sandbox } from 'modal';
import { ModalClient, NotFoundError, ResourceExhaustedError } from 'modal';

import { log } from '../../log';
import { withQuotaBackoff } from '../kit/quota';
import { ifFoundBy } from '../kit/not-found';
import type { ModalSettings } from './settings';

/** gRPC status codes the SDK's errors carry (nice-grpc's ClientError.code). */
const NOT_FOUND = 5;
const RESOURCE_EXHAUSTED = 8;
const FAILED_PRECONDITION = 9;

/** The SDK's own log lines go to Rollout's log: its warnings (Modal's server warnings among them) as warnings. */
const sdkLogger: Logger = {
  debug: (message) => log.debug(`modal: ${message}`),
  info: (message) => log.debug(`modal: ${message}`),
  warn: (message) =>
    // Plain-text connections to a local server (the stand-in, on purpose), and a workspace-wide listing (the janitor's
    // look for sandboxes of any App, on purpose): not for the user.
    /insecure TLS|without an `appId`/.test(message) ? log.debug(`modal: ${message}`) : log.warn(`modal: ${message}`),
  error: (message) => log.warn(`modal: ${message}`),
};

type Middleware = NonNullable<ModalClientParams['grpcMiddleware']>[number];

/** The image build in progress in this async context (see ModalConnection.observeBuild). */
const builds = new AsyncLocalStorage<{ joined: boolean }>();

/**
 * Notes that an image build had to wait for Modal's builder (ImageJoinStreaming): Modal answers a layer it has
 * already built at once, so a build that never joins found the image built (by another job, or `rollout build`).
 */
const observeJoins: Middleware = async function* (call, options) {
  if (call.method.path.endsWith('/ImageJoinStreaming')) {
    const build = builds.getStore();
    if (build) build.joined = true;
  }
  return yield* call.next(call.request as never, options);
};

export class ModalConnection {
  private clientInstance: ModalClient | undefined;
  private readonly apps = new Map<string, Promise<App>>();
  private readonly sandboxes = new Map<string, Sandbox>();

  /** `quotaWaitMs`: how long a quota reply is waited on in all (default ROLLOUT_CLOUD_QUOTA_WAIT_SEC). */
  constructor(private readonly quotaWaitMs?: number) {}

  /** Made on first use: the SDK reads MODAL_* and ~/.modal.toml then, in the worker's own environment. */
  get client(): ModalClient {
    this.clientInstance ??= new ModalClient({ logger: sdkLogger, grpcMiddleware: [observeJoins] });
    return this.clientInstance;
  }

  /** The job's App (made if missing), looked up once per process. */
  app(settings: Pick<ModalSettings, 'app' | 'environment'>): Promise<App> {
    const key = `${settings.environment ?? ''}/${settings.app}`;
    let app = this.apps.get(key);
    if (!app) {
      app = this.withQuotaBackoff('looking up the App', () =>
        this.client.apps.fromName(settings.app, { environment: settings.environment, createIfMissing: true })
      );
      app.catch(() => this.apps.delete(key));
      this.apps.set(key, app);
    }
    return app;
  }

  /** The names of the workspace's Modal Environments (where the janitor looks). */
  environmentNames(): Promise<string[]> {
    return this.withQuotaBackoff('listing environments', async () => {
      const names: string[] = [];
      for await (const environment of this.client.environments.objects.list()) names.push(environment.name);
      return names;
    });
  }

  /** Runs an image build; `built`: Modal's builder ran for it (it was not built already). */
  async observeBuild<T>(build: () => Promise<T>): Promise<{ result: T; built: boolean }> {
    const observed = { joined: false };
    const result = await builds.run(observed, build);
    return { result, built: observed.joined };
  }

  /** Apps this process has used: where its janitor looks for sandboxes. */
  async knownApps(): Promise<App[]> {
    const settled = await Promise.allSettled(this.apps.values());
    return settled.flatMap((result) => (result.status === 'fulfilled' ? [result.value] : []));
  }

  /** The SDK's handle of a sandbox (it keeps the connection to the sandbox's command router): one per id. */
  async sandbox(id: string): Promise<Sandbox> {
    let sandbox = this.sandboxes.get(id);
    if (!sandbox) {
      sandbox = await this.withQuotaBackoff('looking up a sandbox', () => this.client.sandboxes.fromId(id));
      this.sandboxes.set(id, sandbox);
    }
    return sandbox;
  }

  remember(sandbox: Sandbox): void {
    this.sandboxes.set(sandbox.sandboxId, sandbox);
  }

  forget(id: string): void {
    this.sandboxes.get(id)?.detach();
    this.sandboxes.delete(id);
  }

  /**
   * Runs a call of Modal's API, waiting with backoff while Modal answers with a quota or rate limit; then a
   * CloudQuotaError (an infrastructure error: never the agent's) with Modal's own message.
   */
  withQuotaBackoff<T>(what: string, call: () => Promise<T>, signal?: AbortSignal): Promise<T> {
    return withQuotaBackoff('modal', (err) => (isQuota(err) ? sdkMessage(err) : null), call, {
      maxWaitMs: this.quotaWaitMs,
      signal,
      onWait: (delayMs, message) =>
        log.debug(`modal: ${what}: ${message}; trying again in ${Math.round(delayMs / 1000)} s`),
    });
  }
}

/** Modal's reply to a workspace at its limits: RESOURCE_EXHAUSTED (or the SDK's own error for no capacity). */
export function isQuota(err: unknown): boolean {
  return err instanceof ResourceExhaustedError || grpcCode(err) === RESOURCE_EXHAUSTED;
}

/** Modal's reply that a sandbox (or image) is not there: it no longer exists, or (a sandbox) it has finished. */
export function isNotFound(err: unknown): boolean {
  const code = grpcCode(err);
  return err instanceof NotFoundError || code === NOT_FOUND || code === FAILED_PRECONDITION;
}

/** The call's value, or undefined when Modal says what it reads or removes is not there. */
export const ifFound = ifFoundBy(isNotFound);

function grpcCode(err: unknown): number | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'number' ? code : undefined;
}

/** The vendor's message: nice-grpc's `details`, else the error's own. */
export function sdkMessage(err: unknown): string {
  const details = (err as { details?: unknown } | null)?.details;
  if (typeof details === 'string' && details) return details;
  return err instanceof Error ? err.message : String(err);
}
