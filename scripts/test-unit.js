#!/usr/bin/env node
// `npm run test:unit`: the tests in test/unit, on the last build. They need no Docker, no Temporal server and no
// scripts/setup-tests.sh (each runs in its own process, on its own ports and temporary folders), so they run two at a
// time. `npm run test:unit -- <filter>` runs the matching files only.
'use strict';
const { spawnSync } = require('node:child_process');
const { existsSync, readdirSync } = require('node:fs');
const path = require('node:path');

const unitDir = path.join(__dirname, '..', 'dist', 'test', 'unit');
if (!existsSync(unitDir)) {
  console.error('test:unit: dist/test/unit is missing: run `npm run build` first');
  process.exit(1);
}
const filters = process.argv.slice(2);
const files = readdirSync(unitDir)
  .filter((name) => name.endsWith('.test.js'))
  .filter((name) => filters.length === 0 || filters.some((f) => name.includes(f)))
  .sort()
  .map((name) => path.join(unitDir, name));
if (files.length === 0) {
  console.error(`test:unit: no test files match ${filters.join(' ')}`);
  process.exit(1);
}
const run = spawnSync(
  process.execPath,
  ['--test', '--test-concurrency=2', '--test-force-exit', '--test-timeout=120000', '--test-reporter=spec', ...files],
  { stdio: 'inherit' }
);
process.exit(run.status ?? 1);
