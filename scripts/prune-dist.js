#!/usr/bin/env node
// Removes compiled files whose source is gone (a module moved or deleted) before tsc writes the rest: tsc never
// deletes old output, and a stale dist/src/environments/docker.js would shadow the docker/ folder that replaced it.
'use strict';
const { readdirSync, rmSync, existsSync } = require('node:fs');
const path = require('node:path');

const root = path.join(__dirname, '..');
const dist = path.join(root, 'dist');
const OUTPUT = /\.(d\.ts|js\.map|js|d\.ts\.map)$/;

function prune(dir) {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const file = path.join(dir, entry.name);
    if (entry.isDirectory()) {
      prune(file);
      if (readdirSync(file).length === 0) rmSync(file, { recursive: true });
      continue;
    }
    const match = OUTPUT.exec(entry.name);
    if (!match) continue;
    const source = path.join(root, path.relative(dist, dir), entry.name.slice(0, -match[0].length));
    if (!existsSync(`${source}.ts`) && !existsSync(`${source}.json`)) rmSync(file);
  }
}

if (existsSync(dist)) prune(dist);
