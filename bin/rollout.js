#!/usr/bin/env node
'use strict';
const path = require('node:path');
const { existsSync } = require('node:fs');

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
