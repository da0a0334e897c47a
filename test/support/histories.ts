/**
 * Recorded histories of real Job and Trial runs, replayed in CI to prove workflow code changes do not break running
 * jobs. `ROLLOUT_RECORD_HISTORIES=1 npm test -- e2e` (re)records them from the end-to-end tests.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';

import type { Client } from '@temporalio/client';
import { historyToJSON } from '@temporalio/common/lib/proto-utils';

import { REPO_ROOT } from './temporal';

export const HISTORIES_DIR = path.join(REPO_ROOT, 'test', 'histories');

export async function recordHistory(client: Client, workflowId: string, name: string): Promise<void> {
  if (process.env.ROLLOUT_RECORD_HISTORIES !== '1') return;
  const history = await client.workflow.getHandle(workflowId).fetchHistory();
  await mkdir(HISTORIES_DIR, { recursive: true });
  await writeFile(path.join(HISTORIES_DIR, `${name}.json`), historyToJSON(history));
}
