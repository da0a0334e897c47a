/**
 * How an agent's environment reaches the model gateway of the worker running its execute step, chosen per
 * environment:
 * - it reaches this host (a Docker container via the bridge, a pod via ROLLOUT_KUBERNETES_GATEWAY_HOST): directly;
 * - the worker has a public URL (ROLLOUT_GATEWAY_PUBLIC_URL, mapped by the user's proxy or tunnel to the address
 *   ROLLOUT_GATEWAY_LISTEN): that URL, with the same per-trial token;
 * - it can run a process with stdin/stdout streamed (a cloud sandbox): the relay of host.ts;
 * - else the agent cannot reach the gateway: a clear error naming the variable that would fix it.
 * ROLLOUT_GATEWAY_RELAY=1 makes the relay win over the direct way (a pod that cannot reach the worker).
 * The real key stays on the worker in every case.
 */
import type { Environment } from '../../contracts/environment';
import { TaskEnvironmentError } from '../../contracts/environment';
import type { EnvironmentHandle } from '../../contracts/trial';
import type { ModelGateway, TrialSession } from '../gateway';
import type { GatewayAccess } from '../../contracts/agent';
import { openGatewayRelay } from './host';

export interface GatewayChannel {
  access: GatewayAccess;
  /** For the trial log: how the environment reaches the gateway. */
  description: string;
  /** Why the channel was stopped mid-step (a relay that broke the protocol), or null. */
  failure(): string | null;
  close(): Promise<void>;
}

/** What the relay tells the step: its stderr lines (capped), and that it was stopped. */
export interface ChannelHooks {
  onLog?: (line: string) => void;
  onFailure?: (message: string) => void;
}

const DEFAULT_LISTEN = '127.0.0.1:8790';

export async function openGatewayChannel(
  gateway: ModelGateway,
  session: TrialSession,
  environment: Environment,
  handle: EnvironmentHandle,
  env: NodeJS.ProcessEnv = process.env,
  hooks: ChannelHooks = {}
): Promise<GatewayChannel> {
  const none = async () => {};
  const sound = () => null;
  const relayForced = env.ROLLOUT_GATEWAY_RELAY === '1' && environment.openProcess !== undefined;
  if (environment.gatewayHost && !relayForced) {
    const host = await environment.gatewayHost();
    return { access: await session.access(host), description: `the gateway at ${host}`, failure: sound, close: none };
  }
  // The environment is this host itself (local): the gateway on loopback.
  if (environment.hostBound && !environment.gatewayHost && !environment.openProcess) {
    return { access: await session.access(), description: 'the gateway on loopback', failure: sound, close: none };
  }
  const publicUrl = env.ROLLOUT_GATEWAY_PUBLIC_URL;
  if (publicUrl && !relayForced) {
    const { host, port } = listenAddress(env.ROLLOUT_GATEWAY_LISTEN ?? DEFAULT_LISTEN);
    await gateway.urlFor(host, port);
    return {
      access: session.accessAt(publicUrl),
      description: `the public gateway URL ${publicUrl}`,
      failure: sound,
      close: none,
    };
  }
  if (environment.openProcess) {
    const relay = await openGatewayRelay(environment, handle, {
      gatewayOrigin: await gateway.urlFor('127.0.0.1'),
      trialPath: `/t/${session.pathId}/`,
      ...hooks,
    });
    return {
      access: session.accessAt(relay.origin),
      description: `the gateway relay (${relay.runtime}) at ${relay.origin}`,
      failure: () => relay.failure(),
      close: () => relay.close(),
    };
  }
  throw new TaskEnvironmentError(
    'EnvironmentStartError',
    `${environment.type} environments cannot reach the model gateway: set ROLLOUT_GATEWAY_PUBLIC_URL on the worker ` +
      '(see docs/environments.md)'
  );
}

/** ROLLOUT_GATEWAY_LISTEN: `host:port` (an IPv6 host in brackets). */
export function listenAddress(value: string): { host: string; port: number } {
  const match = /^\[?([^\]]+?)\]?:(\d{1,5})$/.exec(value.trim());
  const port = Number(match?.[2]);
  if (!match || port < 1 || port > 65535) {
    throw new Error(`ROLLOUT_GATEWAY_LISTEN: expected host:port (e.g. ${DEFAULT_LISTEN}), got "${value}"`);
  }
  return { host: match[1]!, port };
}
