/**
 * The tests' own Temporal dev server (real server, SQLite, its own ports and state folder), started through the
 * same code the CLI uses. A test that cannot start or reach it fails with the reason; it never skips.
 */
import path from 'node:path';

import type { Client, Connection } from '@temporalio/client';
import { DefaultLogger, Runtime } from '@temporalio/worker';

import { connectClient, ensureSearchAttributes } from '../../src/temporal/connect';
import type { DevServerConfig } from '../../src/temporal/dev-server';
import { ensureDevServer } from '../../src/temporal/dev-server';

// Worker logs at WARN and above: the tests' own output stays readable.
try {
  Runtime.install({ logger: new DefaultLogger('WARN') });
} catch {
  // Already installed by this process.
}

export const REPO_ROOT = path.resolve(__dirname, '..', '..', '..');

export const TEST_SERVER: DevServerConfig = {
  stateDir: path.join(REPO_ROOT, '.rollout-test', 'temporal'),
  ip: '127.0.0.1',
  port: Number(process.env.ROLLOUT_TEST_TEMPORAL_PORT ?? 17233),
  uiPort: Number(process.env.ROLLOUT_TEST_TEMPORAL_PORT ?? 17233) + 1000,
};

export const TEST_ADDRESS = `${TEST_SERVER.ip}:${TEST_SERVER.port}`;

/**
 * Host id of the tests' workers, unique per test server port: several checkouts can run their suites on one Docker
 * host at once without their janitors taking each other's containers for abandoned ones.
 */
export const TEST_HOST_ID = `test-host-${TEST_SERVER.port}`;

export async function testTemporal(): Promise<{ client: Client; connection: Connection }> {
  await ensureDevServer(TEST_SERVER);
  const endpoint = { address: TEST_ADDRESS, namespace: 'default', uiUrl: null };
  const connected = await connectClient(endpoint);
  await ensureSearchAttributes(connected.connection, 'default');
  return connected;
}
