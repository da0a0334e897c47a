import { Client, Connection, isGrpcServiceError, ServiceError } from '@temporalio/client';
import { msToTs } from '@temporalio/common/lib/time';
import { temporal } from '@temporalio/proto';

import { devServerConfig, ensureDevServer } from './dev-server';
import type { ProfileSetting, TemporalConnectionOptions } from './envconfig';
import { loadTemporalProfile, TemporalConfigError } from './envconfig';
import { rolloutDataConverter } from './payload-codec';
import { ROLLOUT_SEARCH_ATTRIBUTES } from '../../workflows/search-attributes';
import { tlsPreflight } from './tls-preflight';

/**
 * Where Rollout talks to Temporal: the server Temporal's environment configuration names (TEMPORAL_ADDRESS, a
 * temporal.toml profile; see envconfig.ts), else the local dev server (started on demand).
 */
export interface TemporalEndpoint {
  address: string;
  namespace: string;
  /** Base URL of the Web UI, when known. */
  uiUrl: string | null;
  /** TLS, API key, gRPC metadata (none for the dev server). */
  connection?: TemporalConnectionOptions;
  /** The embedded dev server: Rollout may create its namespace. */
  devServer?: boolean;
  /** Where a setting came from, for error messages (default: its environment variable). */
  where?: (setting: ProfileSetting) => string;
}

export async function resolveTemporal(options: { startDevServer: boolean }): Promise<TemporalEndpoint> {
  const profile = loadTemporalProfile();
  rolloutDataConverter(); // a bad ROLLOUT_PAYLOAD_KEY stops here, before anything starts
  const { namespace, where } = profile;
  if (profile.address) {
    const uiUrl = process.env.TEMPORAL_UI_URL ?? null;
    return { address: profile.address, namespace, uiUrl, connection: profile.connection, where };
  }
  const config = devServerConfig();
  const status = options.startDevServer ? await ensureDevServer(config) : undefined;
  return {
    address: `${config.ip === '0.0.0.0' ? '127.0.0.1' : config.ip}:${config.port}`,
    namespace,
    uiUrl: status?.uiUrl ?? null,
    devServer: true,
    where,
  };
}

/**
 * A client of the endpoint's namespace, checked: the server answers (TLS handshake, client certificate), accepts the
 * credentials and has the namespace (created on the dev server). Each failure is one line naming the setting.
 */
export async function connectClient(endpoint: TemporalEndpoint): Promise<{ connection: Connection; client: Client }> {
  const where = endpoint.where ?? ((setting: ProfileSetting) => `TEMPORAL_${setting.toUpperCase()}`);
  const tls = endpoint.connection?.tls;
  if (tls) await tlsPreflight(endpoint.address, tls, where);
  let connection: Connection;
  try {
    connection = await Connection.connect({
      address: endpoint.address,
      connectTimeout: 10_000,
      ...endpoint.connection,
    });
  } catch (err) {
    // The SDK's first call (GetSystemInfo) already carries the API key: a refused one fails the connection.
    const cause = err instanceof Error ? err.cause : undefined;
    if (endpoint.connection?.apiKey && (hasCode(cause, GRPC_UNAUTHENTICATED) || hasCode(cause, GRPC_PERMISSION_DENIED)))
      throw new TemporalConfigError(
        `Temporal at ${endpoint.address} refused the API key (${where('api_key')}): ${firstLine(cause)}`,
        { cause: err }
      );
    throw new TemporalConfigError(
      `Temporal unreachable at ${endpoint.address} (${where('address')}${tlsNote(endpoint, where)}): ` + firstLine(err),
      { cause: err }
    );
  }
  try {
    await checkNamespace(connection, endpoint, where);
  } catch (err) {
    await connection.close();
    throw err;
  }
  return {
    connection,
    client: new Client({ connection, namespace: endpoint.namespace, dataConverter: rolloutDataConverter() }),
  };
}

async function checkNamespace(
  connection: Connection,
  endpoint: TemporalEndpoint,
  where: (setting: ProfileSetting) => string
): Promise<void> {
  try {
    await connection.workflowService.describeNamespace({ namespace: endpoint.namespace });
  } catch (err) {
    if (isNotFound(err) && endpoint.devServer) {
      await connection.workflowService.registerNamespace({
        namespace: endpoint.namespace,
        workflowExecutionRetentionPeriod: msToTs(NAMESPACE_RETENTION),
      });
      return;
    }
    if (isNotFound(err))
      throw new TemporalConfigError(
        `Temporal namespace "${endpoint.namespace}" (${where('namespace')}) does not exist on ${endpoint.address}`
      );
    if (hasCode(err, GRPC_UNAUTHENTICATED) || hasCode(err, GRPC_PERMISSION_DENIED)) {
      const credential = endpoint.connection?.apiKey ? `the API key (${where('api_key')})` : 'no API key';
      throw new TemporalConfigError(
        `Temporal at ${endpoint.address} refused ${credential} for namespace "${endpoint.namespace}": ${firstLine(err)}`
      );
    }
    throw new TemporalConfigError(
      `Temporal at ${endpoint.address} (${where('address')}${tlsNote(endpoint, where)}): ${firstLine(err)}`,
      { cause: err }
    );
  }
}

/** `, TLS from …` when TLS is on: a refused handshake or client certificate shows as the server being unreachable. */
function tlsNote(endpoint: TemporalEndpoint, where: (setting: ProfileSetting) => string): string {
  const tls = endpoint.connection?.tls;
  if (!tls) return '';
  if (tls === true) return ', TLS';
  return tls.clientCertPair
    ? `, TLS with the client certificate of ${where('tls.client_cert')}`
    : ', TLS without a client certificate';
}

function firstLine(err: unknown): string {
  return (err instanceof Error ? err.message : String(err)).split('\n')[0]!;
}

const INDEXED_TYPES: Record<string, temporal.api.enums.v1.IndexedValueType> = {
  KEYWORD: temporal.api.enums.v1.IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
  INT: temporal.api.enums.v1.IndexedValueType.INDEXED_VALUE_TYPE_INT,
  DOUBLE: temporal.api.enums.v1.IndexedValueType.INDEXED_VALUE_TYPE_DOUBLE,
};

/** Retention of a namespace Rollout creates: closed Jobs and Trials stay queryable for 30 days. */
const NAMESPACE_RETENTION = '30 days';

/**
 * Makes a server ready for Rollout, a no-op once it is: the dev server creates its namespace and search attributes
 * at start, a production server (scripts/temporal-cluster.sh, docker-compose.temporal.yml) may have neither yet.
 * Creates the namespace when missing, registers Rollout's search attributes, then waits until visibility accepts
 * queries on them: a real server learns of namespace changes through a cache refreshed every few seconds, and
 * starting a workflow with an attribute it does not know yet fails.
 */
export async function ensureSearchAttributes(
  connection: Connection,
  namespace: string,
  timeoutMs = 60_000
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  await connection.workflowService.describeNamespace({ namespace }).catch(async (err: unknown) => {
    if (!isNotFound(err)) throw err;
    await connection.workflowService.registerNamespace({
      namespace,
      workflowExecutionRetentionPeriod: msToTs(NAMESPACE_RETENTION),
    });
  });
  for (;;) {
    try {
      const existing = await connection.operatorService.listSearchAttributes({ namespace });
      const known = new Set(Object.keys(existing.customAttributes ?? {}));
      const missing = ROLLOUT_SEARCH_ATTRIBUTES.filter((key) => !known.has(key.name));
      if (missing.length > 0) {
        await connection.operatorService.addSearchAttributes({
          namespace,
          searchAttributes: Object.fromEntries(missing.map((key) => [key.name, INDEXED_TYPES[key.type]!])),
        });
      }
      const query = ROLLOUT_SEARCH_ATTRIBUTES.map((key) => `${key.name} IS NULL`).join(' AND ');
      await connection.workflowService.countWorkflowExecutions({ namespace, query });
      return;
    } catch (err) {
      // NotFound: the namespace is not in the caches yet; InvalidArgument: an attribute is not.
      if (!(isNotFound(err) || hasCode(err, GRPC_INVALID_ARGUMENT)) || Date.now() > deadline) throw err;
      await new Promise((resolve) => setTimeout(resolve, 500));
    }
  }
}

// gRPC status codes (grpc-js `status`, a dependency of the SDK rather than of Rollout).
const GRPC_INVALID_ARGUMENT = 3;
const GRPC_NOT_FOUND = 5;
const GRPC_PERMISSION_DENIED = 7;
const GRPC_UNAUTHENTICATED = 16;

function hasCode(err: unknown, code: number): boolean {
  return isGrpcServiceError(err) && (err.code as number) === code;
}

function isNotFound(err: unknown): boolean {
  return hasCode(err, GRPC_NOT_FOUND);
}

/**
 * A workflow's result, waited for across restarts of the Temporal server: its long poll fails while the server is
 * down or still starting (a server on PostgreSQL takes tens of seconds, longer than the client's own retries). Gives
 * up after `patienceMs` of failing polls in a row; a workflow's own failure is thrown at once.
 */
export async function resultAcrossRestarts<T>(handle: { result(): Promise<T> }, patienceMs = 300_000): Promise<T> {
  let failingSince: number | undefined;
  for (;;) {
    const polled = Date.now();
    try {
      return await handle.result();
    } catch (err) {
      if (!(err instanceof ServiceError)) throw err;
      // A poll that failed only after a long wait had reached the server: the outage is a new one.
      if (failingSince === undefined || Date.now() - polled > 60_000) failingSince = polled;
      if (Date.now() - failingSince > patienceMs) throw err;
      await new Promise((resolve) => setTimeout(resolve, 1000));
    }
  }
}

export function workflowUiUrl(endpoint: TemporalEndpoint, workflowId: string): string | null {
  if (!endpoint.uiUrl) return null;
  return `${endpoint.uiUrl}/namespaces/${encodeURIComponent(endpoint.namespace)}/workflows/${encodeURIComponent(workflowId)}`;
}
