#!/usr/bin/env node
// Runs the compiled test files with node's test runner, one file at a time (they share one Docker engine and one
// Temporal dev server on 2 cores), then stops the test dev server. `npm test -- <filter>` runs matching files only.
'use strict';
const { spawnSync } = require('node:child_process');
const { readdirSync, rmSync } = require('node:fs');
const path = require('node:path');

const root = path.join(__dirname, '..');
const testDir = path.join(root, 'dist', 'test');
const filters = process.argv.slice(2);
const files = readdirSync(testDir)
  .filter((name) => name.endsWith('.test.js'))
  .filter((name) => filters.length === 0 || filters.some((f) => name.includes(f)))
  .sort()
  .map((name) => path.join(testDir, name));
if (files.length === 0) {
  console.error(`no test files match ${filters.join(' ')}`);
  process.exit(1);
}
// A fresh Temporal database each run: results do not depend on what earlier runs left in it.
const stopServer = () =>
  spawnSync(process.execPath, [path.join(testDir, 'support', 'stop-server.js')], { cwd: root, stdio: 'inherit' });
stopServer();
rmSync(path.join(root, '.rollout-test'), { recursive: true, force: true });
// Every test is bounded: one that hangs fails with "test timed out" instead of holding CI up.
const TEST_TIMEOUT_MS = 20 * 60_000;
const run = spawnSync(
  process.execPath,
  ['--test', '--test-concurrency=1', `--test-timeout=${TEST_TIMEOUT_MS}`, '--test-reporter=spec', ...files],
  {
    cwd: root,
    stdio: 'inherit',
  }
);
stopServer();
process.exit(run.status ?? 1);
