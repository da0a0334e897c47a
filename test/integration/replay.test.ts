/**
 * Determinism: every committed history of a real Job or Trial run replays against the current workflow code
 * (no server needed). A change that breaks one needs `patched()`.
 */
import assert from 'node:assert/strict';
import { readFile, readdir } from 'node:fs/promises';
import path from 'node:path';
import { before, describe, it } from 'node:test';

import { DeterminismViolationError } from '@temporalio/workflow';
import { bundleWorkflowCode, Worker } from '@temporalio/worker';

import { quietLogger } from '../../workers/workflow-bundle';
import { HISTORIES_DIR } from '../support/histories';

let workflowBundle: { code: string };
const historyFiles = async () => (await readdir(HISTORIES_DIR)).filter((name) => name.endsWith('.json')).sort();

describe('replaying recorded histories', () => {
  before(async () => {
    workflowBundle = await bundleWorkflowCode({
      workflowsPath: require.resolve('../../workflows'),
      logger: quietLogger,
    });
  });

  it('has histories of both workflow types to replay', async () => {
    const files = await historyFiles();
    assert.ok(
      files.some((f) => f.startsWith('job')),
      files.join()
    );
    assert.ok(
      files.some((f) => f.startsWith('trial')),
      files.join()
    );
  });

  it('replays every recorded history with the current workflow code', async () => {
    for (const file of await historyFiles()) {
      const history = JSON.parse(await readFile(path.join(HISTORIES_DIR, file), 'utf8')) as unknown;
      await Worker.runReplayHistory({ workflowBundle, replayName: file }, history);
    }
  });

  it('detects a history the code could not have produced', async () => {
    const file = (await historyFiles()).find((f) => f.startsWith('trial'));
    assert.ok(file);
    const text = await readFile(path.join(HISTORIES_DIR, file), 'utf8');
    const tampered = JSON.parse(text.replaceAll('"buildEnvironment"', '"somethingElse"')) as unknown;
    await assert.rejects(
      Worker.runReplayHistory({ workflowBundle, replayName: `tampered ${file}` }, tampered),
      DeterminismViolationError
    );
  });
});
