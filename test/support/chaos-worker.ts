/**
 * One worker process of the chaos run (test/support/chaos-run.ts): the workers `rollout worker` starts (workflows,
 * the folder-sandbox provider's queues, its janitor) with the simulated provider registered, as a job's
 * `environment.import` registers it. Killed with SIGKILL by the run; restarted under the same host id.
 * Env: TEMPORAL_ADDRESS, HOST_ID, MAX_TRIALS, ROLLOUT_FOLDER_SANDBOX_DIR (and _429), ROLLOUT_LEASE_DIR, TMPDIR.
 */
import { Client, Connection } from '@temporalio/client';

import { addImportedProvider } from '../../src/environments';
import { startWorkers } from '../../workers/create-workers';
import folderSandbox from '../fixtures/providers/folder-sandbox';
import './temporal'; // worker logs at WARN

async function main(): Promise<void> {
  const env = (name: string) => {
    const value = process.env[name];
    if (!value) throw new Error(`${name} is not set`);
    return value;
  };
  addImportedProvider(folderSandbox);
  const address = env('TEMPORAL_ADDRESS');
  const connection = await Connection.connect({ address });
  const running = await startWorkers({
    client: new Client({ connection }),
    address,
    namespace: 'default',
    hostId: env('HOST_ID'),
    environmentTypes: [folderSandbox.type],
    maxTrials: Number(env('MAX_TRIALS')),
    serveWorkflows: true,
  });
  console.log('ready');
  process.on('SIGTERM', () => void running.stop());
  await running.done;
  await connection.close();
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
