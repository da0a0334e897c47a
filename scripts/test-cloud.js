#!/usr/bin/env node
// `npm run test:cloud`: the cloud providers' shared suite (test/support/cloud-suite.ts) against the real services,
// for each vendor whose credentials are set; the others print "NOT RUN: <vendor> (set X)". "Not run" is never
// "passed". The same suite runs on each vendor's stand-in in `npm test` (test/environments/<vendor>/e2e.cloud-<vendor>.test.ts).
'use strict';
const { spawnSync } = require('node:child_process');
const { existsSync } = require('node:fs');
const os = require('node:os');
const path = require('node:path');

const root = path.join(__dirname, '..');
const has = (...names) => names.every((name) => Boolean(process.env[name]));

/** Per vendor: whether its credentials are there, and what to set when not. */
const VENDORS = {
  daytona: { ready: () => has('DAYTONA_API_KEY'), needs: 'DAYTONA_API_KEY' },
  e2b: { ready: () => has('E2B_API_KEY'), needs: 'E2B_API_KEY' },
  fly: { ready: () => has('FLY_API_TOKEN', 'ROLLOUT_TEST_FLY_APP'), needs: 'FLY_API_TOKEN and ROLLOUT_TEST_FLY_APP' },
  modal: {
    ready: () => has('MODAL_TOKEN_ID', 'MODAL_TOKEN_SECRET') || existsSync(path.join(os.homedir(), '.modal.toml')),
    needs: 'MODAL_TOKEN_ID and MODAL_TOKEN_SECRET, or ~/.modal.toml',
  },
};

let failed = false;
let ran = 0;
for (const [vendor, { ready, needs }] of Object.entries(VENDORS)) {
  if (!ready()) {
    console.log(`test:cloud: NOT RUN: ${vendor} (set ${needs})`);
    continue;
  }
  ran += 1;
  const started = Date.now();
  const result = spawnSync(process.execPath, [path.join(__dirname, 'run-tests.js'), `e2e.cloud-${vendor}`], {
    cwd: root,
    stdio: 'inherit',
    env: { ...process.env, ROLLOUT_TEST_CLOUD: 'real' },
  });
  const seconds = ((Date.now() - started) / 1000).toFixed(1);
  console.log(`test:cloud: ${vendor}: ${result.status === 0 ? 'passed' : 'FAILED'} in ${seconds} s`);
  if (result.status !== 0) failed = true;
}
if (ran === 0) console.log('test:cloud: nothing was tested (no credentials set)');
process.exit(failed ? 1 : 0);
