#!/usr/bin/env node
'use strict';
const path = require('node:path');
const { existsSync } = require('node:fs');
const { constants } = require('node:os');

// In a container node runs as PID 1, and a PID 1 ignores a signal it has no handler for: a SIGTERM while the CLI
// still loads (a pod deleted as it starts) would be lost, and the pod would wait out its whole grace period. From the
// first line, SIGTERM and SIGINT end the process as they end any other, until a command handles them itself (the
// worker drains, a run detaches).
for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => {
    if (process.listenerCount(signal) === 1) process.exit(128 + constants.signals[signal]);
  });
}

const main = path.join(__dirname, '..', 'dist', 'src', 'cli', 'main.js');
if (!existsSync(main)) {
  console.error(
    `error: ${main} is missing: run \`npm install\` (or \`npm run build\`) in ${path.dirname(__dirname)} first`
  );
  process.exit(3);
}
require(main)
  .main(process.argv)
  .then(() => process.exit(process.exitCode ?? 0));
