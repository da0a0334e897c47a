#!/usr/bin/env node
// Runs the compiled test files with node's test runner, one file at a time (they share one Docker engine and one
// Temporal dev server on 2 cores), then stops the test dev server. `npm test -- <filter>` runs matching files only.
'use strict';
const { spawn, spawnSync } = require('node:child_process');
const { readdirSync, rmSync } = require('node:fs');
const path = require('node:path');

const root = path.join(__dirname, '..');
const testDir = path.join(root, 'dist', 'test');
const filters = process.argv.slice(2);
// Test files live in test/unit, test/integration, test/e2e and test/environments/<provider>; a filter matches a file's
// name wherever it lives (`e2e.budget`, `gateway.tokens`), or its path under dist/test (`unit/`, `environments/fly`).
const testFiles = (dir) =>
  readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const file = path.join(dir, entry.name);
    if (entry.isDirectory()) return entry.name === 'fixtures' ? [] : testFiles(file);
    return entry.name.endsWith('.test.js') ? [file] : [];
  });
const files = testFiles(testDir)
  .filter((file) => filters.length === 0 || filters.some((f) => path.relative(testDir, file).includes(f)))
  .sort((a, b) => path.basename(a).localeCompare(path.basename(b)));
if (files.length === 0) {
  console.error(`no test files match ${filters.join(' ')}`);
  process.exit(1);
}
// The cloud stand-ins' end-to-end files mostly wait (on sandboxes, restarts, quota backoff): they run beside the rest,
// as a second group on a Temporal server of its own (port + 500), so the suite takes the longer group's time, not
// the sum. Its output is kept and printed after the first group's.
const BESIDE = /^e2e\.cloud-/;
const basePort = Number(process.env.ROLLOUT_TEST_TEMPORAL_PORT ?? 17233);
const beside = files.filter((file) => BESIDE.test(path.basename(file)));
const groups = [
  { files: files.filter((file) => !BESIDE.test(path.basename(file))), port: basePort, live: true },
  { files: beside, port: basePort + 500, live: false },
].filter((group) => group.files.length > 0);
if (groups.length === 1) groups[0].live = true;

// A fresh Temporal database each run: results do not depend on what earlier runs left in it.
const stopServer = (port) =>
  spawnSync(process.execPath, [path.join(testDir, 'support', 'stop-server.js')], {
    cwd: root,
    stdio: 'inherit',
    env: { ...process.env, ROLLOUT_TEST_TEMPORAL_PORT: String(port) },
  });
for (const group of groups) stopServer(group.port);
rmSync(path.join(root, '.rollout-test'), { recursive: true, force: true });
// Every test is bounded: one that hangs fails with "test timed out" instead of holding CI up.
const TEST_TIMEOUT_MS = 20 * 60_000;

function runGroup(group) {
  return new Promise((resolve) => {
    const child = spawn(
      process.execPath,
      // --test-force-exit: a file whose tests are done ends even when a vendor SDK keeps a socket or timer alive for
      // minutes (seen with Daytona's); the CLI itself exits explicitly.
      [
        '--test',
        '--test-concurrency=1',
        '--test-force-exit',
        `--test-timeout=${TEST_TIMEOUT_MS}`,
        '--test-reporter=spec',
        ...group.files,
      ],
      {
        cwd: root,
        stdio: group.live ? 'inherit' : ['ignore', 'pipe', 'pipe'],
        env: {
          ...process.env,
          ROLLOUT_TEST_TEMPORAL_PORT: String(group.port),
          // A UI port given for the first group is not the second's.
          ...(group.live ? {} : { ROLLOUT_TEST_TEMPORAL_UI_PORT: String(group.port + 1000) }),
        },
      }
    );
    const output = [];
    child.stdout?.on('data', (chunk) => output.push(chunk));
    child.stderr?.on('data', (chunk) => output.push(chunk));
    child.on('close', (code) => {
      stopServer(group.port);
      resolve({ group, code: code ?? 1, output: Buffer.concat(output) });
    });
  });
}

Promise.all(groups.map(runGroup)).then((results) => {
  for (const { group, output } of results) {
    if (group.live) continue;
    process.stdout.write(
      `\n=== ${group.files.length} test files run beside the others (Temporal port ${group.port}) ===\n`
    );
    process.stdout.write(output);
  }
  process.exit(results.some((result) => result.code !== 0) ? 1 : 0);
});
