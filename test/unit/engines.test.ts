/** The Node versions package.json promises are ones every installed dependency accepts (no EBADENGINE on install). */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';

import semver from 'semver';

import { REPO_ROOT } from '../support/temporal';

interface LockFile {
  packages: Record<string, { engines?: { node?: string } | string[]; dev?: boolean; optional?: boolean }>;
}

describe('engines', () => {
  it('every dependency in the lock file accepts the oldest Node that package.json allows', () => {
    const manifest = JSON.parse(readFileSync(path.join(REPO_ROOT, 'package.json'), 'utf8')) as {
      engines: { node: string };
    };
    const oldest = semver.minVersion(manifest.engines.node);
    assert.ok(oldest, `package.json engines.node is not a range: ${manifest.engines.node}`);
    const lock = JSON.parse(readFileSync(path.join(REPO_ROOT, 'package-lock.json'), 'utf8')) as LockFile;
    const refusing = Object.entries(lock.packages)
      .filter(([name, entry]) => name !== '' && !Array.isArray(entry.engines) && entry.engines?.node)
      // An optional package is one its dependent can do without: e2b loads undici 8 only on Node >= 22.19 and uses
      // undici 7 below (and npm only warns of an optional package's engines).
      .filter(([, entry]) => !entry.optional)
      .filter(([, entry]) => {
        const range = (entry.engines as { node: string }).node;
        return !semver.satisfies(oldest, range, { includePrerelease: true });
      })
      .map(([name, entry]) => `${name} needs node ${(entry.engines as { node: string }).node}`);
    assert.deepEqual(refusing, [], `Node ${oldest.version} (package.json) is refused by:\n${refusing.join('\n')}`);
  });
});
