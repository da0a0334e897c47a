/**
 * package-lock.json must be what `npm install` in a fresh clone writes, and what `npm ci` (every CI system's and the
 * Dockerfile's install) accepts. npm drops the entries of other platforms' optional packages (npm/cli#4828) when it
 * rewrites the lock in a tree whose node_modules lacks them (`npm install <pkg>` here); a fresh clone's install
 * puts them back, and `npm ci` refuses a lock that lacks them ("package.json and package-lock.json … are in sync").
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { copyFile, mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { describe, it } from 'node:test';
import { promisify } from 'node:util';

import { REPO_ROOT } from '../support/temporal';

interface LockEntry {
  optionalDependencies?: Record<string, string>;
}

/** Where npm resolves `name` from the package at `at`: its own node_modules, then each folder above. */
function resolves(packages: Record<string, LockEntry>, at: string, name: string): boolean {
  for (let base = at; ;) {
    if (`${base ? `${base}/` : ''}node_modules/${name}` in packages) return true;
    if (!base) return false;
    const up = base.lastIndexOf('/node_modules/');
    base = up >= 0 ? base.slice(0, up) : '';
  }
}

/**
 * The registry reachable here answers 404 for @cbor-extract's native builds (cbor-x, used by a cloud SDK, falls back
 * to JavaScript without them), so an install here drops their entries: they are restored by hand, as npmjs writes
 * them (version, os, cpu, optional; no integrity), and `npm ci` skips the optional package it cannot fetch.
 */
const RESTORE =
  'restore them (a fresh clone elsewhere, `npm install`; or for @cbor-extract/* the entries from git history), ' +
  'then commit package-lock.json';

describe('package-lock.json', () => {
  it("lists every optional dependency, of every platform, as a fresh clone's npm install writes it", async () => {
    const lock = JSON.parse(await readFile(path.join(REPO_ROOT, 'package-lock.json'), 'utf8')) as {
      packages: Record<string, LockEntry>;
    };
    const missing = Object.entries(lock.packages).flatMap(([at, entry]) =>
      Object.keys(entry.optionalDependencies ?? {})
        .filter((name) => !resolves(lock.packages, at, name))
        .map((name) => `${at || '(root)'} → ${name}`)
    );
    assert.deepEqual(missing, [], RESTORE);
  });

  it('is accepted by `npm ci` in a fresh folder (package.json and the lock in sync)', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'rollout-npm-ci-'));
    try {
      for (const file of ['package.json', 'package-lock.json'])
        await copyFile(path.join(REPO_ROOT, file), path.join(dir, file));
      // --dry-run checks the lock against package.json and plans the tree without fetching; --offline keeps it local.
      const run = await promisify(execFile)('npm', ['ci', '--dry-run', '--ignore-scripts', '--offline', '--no-audit'], {
        cwd: dir,
        timeout: 120_000,
      }).catch((err: { stderr?: string; message: string }) => ({ stdout: '', stderr: err.stderr ?? err.message }));
      assert.doesNotMatch(run.stderr, /npm error/, `npm ci refuses the lock: ${RESTORE}\n${run.stderr}`);
      assert.match(run.stdout, /added \d+ packages/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
