import { Client, Connection } from '@temporalio/client';
import { temporal } from '@temporalio/proto';

import { devServerConfig, ensureDevServer } from './dev-server';
import { ROLLOUT_SEARCH_ATTRIBUTES } from './search-attributes';

/** Where Rollout talks to Temporal: TEMPORAL_ADDRESS when set, else the local dev server (started on demand). */
export interface TemporalEndpoint {
  address: string;
  namespace: string;
  /** Base URL of the Web UI, when known. */
  uiUrl: string | null;
}

export async function resolveTemporal(options: { startDevServer: boolean }): Promise<TemporalEndpoint> {
  const namespace = process.env.TEMPORAL_NAMESPACE ?? 'default';
  if (process.env.TEMPORAL_ADDRESS) {
    return { address: process.env.TEMPORAL_ADDRESS, namespace, uiUrl: process.env.TEMPORAL_UI_URL ?? null };
  }
  const config = devServerConfig();
  const status = options.startDevServer ? await ensureDevServer(config) : undefined;
  return {
    address: `${config.ip === '0.0.0.0' ? '127.0.0.1' : config.ip}:${config.port}`,
    namespace,
    uiUrl: status?.uiUrl ?? null,
  };
}

export async function connectClient(endpoint: TemporalEndpoint): Promise<{ connection: Connection; client: Client }> {
  let connection: Connection;
  try {
    connection = await Connection.connect({ address: endpoint.address, connectTimeout: 10_000 });
  } catch (err) {
    throw new Error(`Temporal unreachable at ${endpoint.address}: ${(err as Error).message.split('\n')[0]}`, {
      cause: err,
    });
  }
  return { connection, client: new Client({ connection, namespace: endpoint.namespace }) };
}

const INDEXED_TYPES: Record<string, temporal.api.enums.v1.IndexedValueType> = {
  KEYWORD: temporal.api.enums.v1.IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD,
  INT: temporal.api.enums.v1.IndexedValueType.INDEXED_VALUE_TYPE_INT,
  DOUBLE: temporal.api.enums.v1.IndexedValueType.INDEXED_VALUE_TYPE_DOUBLE,
};

/** Registers Rollout's search attributes on whatever server it connects to (a no-op once they exist). */
export async function ensureSearchAttributes(connection: Connection, namespace: string): Promise<void> {
  const existing = await connection.operatorService.listSearchAttributes({ namespace });
  const known = new Set(Object.keys(existing.customAttributes ?? {}));
  const missing = ROLLOUT_SEARCH_ATTRIBUTES.filter((key) => !known.has(key.name));
  if (missing.length === 0) return;
  await connection.operatorService.addSearchAttributes({
    namespace,
    searchAttributes: Object.fromEntries(missing.map((key) => [key.name, INDEXED_TYPES[key.type]!])),
  });
}

export function workflowUiUrl(endpoint: TemporalEndpoint, workflowId: string): string | null {
  if (!endpoint.uiUrl) return null;
  return `${endpoint.uiUrl}/namespaces/${encodeURIComponent(endpoint.namespace)}/workflows/${encodeURIComponent(workflowId)}`;
}
