/**
 * The worker's Docker engine, through its API (dockerode): what the docker provider and the image builder (which the
 * kubernetes provider uses too) share — the connection, the address the docker CLI needs, and the owner's labels.
 */
import Docker from 'dockerode';

import type { EnvironmentOwner } from '../../contracts/environment';
import { LABEL_DEPLOYMENT, LABEL_HOST } from '../../contracts/environment';
import { firstLine } from '../exec-output';

const PING_TIMEOUT_MS = 10_000;

export class DockerEngine {
  readonly docker: Docker;
  readonly owner: EnvironmentOwner;

  constructor(options: EnvironmentOwner & { docker?: Docker }) {
    this.docker = options.docker ?? new Docker();
    this.owner = { hostId: options.hostId, deployment: options.deployment };
  }

  /** Label filters for what this host and deployment own. */
  ownedBy(...more: string[]): { label: string[] } {
    return { label: [`${LABEL_HOST}=${this.owner.hostId}`, `${LABEL_DEPLOYMENT}=${this.owner.deployment}`, ...more] };
  }

  async ping(): Promise<void> {
    try {
      await abortable(this.docker.ping() as Promise<unknown>, AbortSignal.timeout(PING_TIMEOUT_MS));
    } catch (err) {
      throw new Error(`Docker daemon unreachable at ${this.daemonAddress()}: ${firstLine(err)}`, { cause: err });
    }
  }

  daemonAddress(): string {
    // The modem keeps its constructor options as fields; the typings do not declare them.
    const { socketPath, host, port, protocol } = this.docker.modem as unknown as Docker.DockerOptions;
    if (host) return `${protocol ?? 'http'}://${host}${port ? `:${port}` : ''}`;
    return typeof socketPath === 'string' ? socketPath : '/var/run/docker.sock';
  }

  /** The daemon this engine talks to, as the docker CLI names it (DOCKER_HOST). */
  dockerHost(): string {
    const address = this.daemonAddress();
    return address.startsWith('/') ? `unix://${address}` : address.replace(/^https?:/, 'tcp:');
  }

  /** The image's labels, or undefined when the image is not on this host. */
  async imageLabels(image: string): Promise<Record<string, string> | undefined> {
    const info = await ignoreMissing(this.docker.getImage(image).inspect());
    return info && (info.Config?.Labels ?? {});
  }
}

/** Settles with the promise, or rejects with the signal's reason as soon as it aborts. */
export function abortable<T>(promise: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (!signal) return promise;
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason as Error);
    if (signal.aborted) onAbort();
    signal.addEventListener('abort', onAbort, { once: true });
    void promise.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}

/** The promise's value, or undefined when what it reads or removes is not there (404). */
export async function ignoreMissing<T>(promise: Promise<T>): Promise<T | undefined> {
  try {
    return await promise;
  } catch (err) {
    if (statusCode(err) === 404) return undefined;
    throw err;
  }
}

export function statusCode(err: unknown): number | undefined {
  return (err as { statusCode?: number } | undefined)?.statusCode;
}

/** The daemon's own error message (dockerode's message starts with a generic reason for the HTTP status). */
export function daemonMessage(err: unknown): string {
  return (err as { json?: { message?: string } }).json?.message ?? '';
}
