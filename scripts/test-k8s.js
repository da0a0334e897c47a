#!/usr/bin/env node
// `npm run test:k8s`: the kubernetes end-to-end tests against the real cluster KUBECONFIG points at (namespace
// ROLLOUT_TEST_KUBERNETES_NAMESPACE, default "default"; built images pushed to ROLLOUT_TEST_KUBERNETES_REGISTRY).
// Without a cluster nothing runs, and it says so: "not run" is never "passed".
'use strict';
const { spawnSync } = require('node:child_process');
const path = require('node:path');

const missing = ['KUBECONFIG', 'ROLLOUT_TEST_KUBERNETES_REGISTRY'].filter((name) => !process.env[name]);
if (missing.length) {
  console.log(`test:k8s: NOT RUN: ${missing.join(' and ')} not set (no cluster to run on); nothing was tested`);
  process.exit(0);
}
const run = spawnSync(process.execPath, [path.join(__dirname, 'run-tests.js'), 'e2e.kubernetes'], {
  stdio: 'inherit',
  env: { ...process.env, ROLLOUT_TEST_KUBERNETES: 'cluster' },
});
process.exit(run.status ?? 1);
