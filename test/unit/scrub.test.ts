/** Secret scrubbing of collected files: any size (streamed), file and folder names, values of any length. */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { spawnSync } from 'node:child_process';
import { chmod, chown, mkdir, mkdtemp, readFile, readdir, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, it } from 'node:test';

import { REDACTED, scrubSecrets, SecretScrubber } from '../../src/results/scrub';
import { REPO_ROOT } from '../support/temporal';

function scrubInChunks(text: string, secrets: string[], chunkBytes: number): string {
  const scrubber = new SecretScrubber(secrets);
  const bytes = Buffer.from(text, 'utf8');
  const parts: Buffer[] = [];
  for (let at = 0; at < bytes.length; at += chunkBytes) parts.push(scrubber.push(bytes.subarray(at, at + chunkBytes)));
  parts.push(scrubber.end());
  return Buffer.concat(parts).toString('utf8');
}

describe('secret scrubbing', () => {
  it('redacts a value however the text is cut into chunks', () => {
    const secret = 'sk-0123456789abcdef';
    const text = `a ${secret} b ${secret}${secret} c é ${secret}`;
    const expected = `a ${REDACTED} b ${REDACTED}${REDACTED} c é ${REDACTED}`;
    for (const chunk of [1, 2, 3, 7, 19, 20, 1000])
      assert.equal(scrubInChunks(text, [secret], chunk), expected, `${chunk}`);
  });

  it('redacts short values only where they stand alone, so ordinary text is not mangled', () => {
    const text = 'KEY=ab "ab" ab. abc xab ab_ 1ab ab';
    for (const chunk of [1, 4, 100]) {
      assert.equal(
        scrubInChunks(text, ['ab'], chunk),
        `KEY=${REDACTED} "${REDACTED}" ${REDACTED}. abc xab ab_ 1ab ${REDACTED}`,
        `${chunk}`
      );
    }
    assert.equal(scrubInChunks('pin 7, 17, 7', ['7'], 1), `pin ${REDACTED}, 17, ${REDACTED}`);
  });

  it('redacts values with regular-expression characters and non-ASCII text exactly', () => {
    assert.equal(scrubInChunks('x a.b*c(d)é y a_b_c', ['a.b*c(d)é'], 3), `x ${REDACTED} y a_b_c`);
  });

  it(
    'streams a 20 MiB file, redacting values at its start, across chunk boundaries and at its end',
    { timeout: 120_000 },
    async () => {
      const dir = await mkdtemp(path.join(tmpdir(), 'rollout-scrub-'));
      const secret = `sk-${randomBytes(16).toString('hex')}`;
      const filler = Buffer.alloc(64 * 1024 - 5, 'x');
      const parts = [Buffer.from(secret)];
      for (let i = 0; i < 320; i++) parts.push(filler, Buffer.from(`\n${secret}\n`));
      const big = Buffer.concat(parts);
      assert.ok(big.length > 20 * 2 ** 20);
      await writeFile(path.join(dir, 'big.log'), big, { mode: 0o640 });
      assert.equal(await scrubSecrets(dir, [secret]), 1);
      const after = await readFile(path.join(dir, 'big.log'), 'latin1');
      assert.ok(!after.includes(secret), 'secret left in the big file');
      assert.equal(after.split(REDACTED).length - 1, 321);
      assert.equal((await stat(path.join(dir, 'big.log'))).mode & 0o777, 0o640);
      assert.deepEqual(await readdir(dir), ['big.log'], 'no temporary file left');
    }
  );

  it('redacts values in file and folder names too', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'rollout-scrub-'));
    const secret = 'hunter2-secret-value';
    await mkdir(path.join(dir, `cache-${secret}`));
    await writeFile(path.join(dir, `cache-${secret}`, `${secret}.txt`), 'nothing to see');
    assert.equal(await scrubSecrets(dir, [secret]), 2);
    assert.deepEqual(await readdir(dir, { recursive: true }), [
      `cache-${REDACTED}`,
      path.join(`cache-${REDACTED}`, `${REDACTED}.txt`),
    ]);
  });

  it('fails when a folder cannot be read, instead of leaving it unscrubbed (EACCES)', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'rollout-scrub-'));
    const secret = 'hunter2-secret-value';
    await mkdir(path.join(dir, 'locked'));
    await writeFile(path.join(dir, 'locked', 'leak.txt'), secret);
    await chmod(path.join(dir, 'locked'), 0o000);
    // Run by another user than root, who reads any folder: the scrub in a child process without privileges.
    const asUser = process.getuid?.() === 0 ? { uid: 65534, gid: 65534 } : {};
    if (asUser.uid !== undefined) await chown(dir, asUser.uid, asUser.gid);
    const scrub = `require(${JSON.stringify(path.join(REPO_ROOT, 'dist', 'src', 'results', 'scrub.js'))})
      .scrubSecrets(${JSON.stringify(dir)}, [${JSON.stringify(secret)}])
      .then((n) => console.log('scrubbed', n), (err) => { console.log('failed', err.code); process.exitCode = 1; });`;
    const child = spawnSync(process.execPath, ['-e', scrub], { encoding: 'utf8', timeout: 30_000, ...asUser });
    await chmod(path.join(dir, 'locked'), 0o700);
    assert.equal(child.stdout.trim(), 'failed EACCES', child.stderr);
    assert.equal(await readFile(path.join(dir, 'locked', 'leak.txt'), 'utf8'), secret);
  });
});
