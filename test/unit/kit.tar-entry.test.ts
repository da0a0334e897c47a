/**
 * The one check of what an archive out of a sandbox may write on the host (src/environments/kit/tar-entry.ts), and
 * extractArchive, which every provider's download goes through: hostile entries (`..`, absolute names, links
 * pointing out, devices, fifos) write nothing, and nothing outside the target folder. No Docker: archives built here.
 */
import assert from 'node:assert/strict';
import { lstat, mkdtemp, readFile, readdir, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import { after, describe, it } from 'node:test';

import tarStream from 'tar-stream';

import { CollectBudget, extractArchive } from '../../src/environments/host-files';
import { tarEntryTarget } from '../../src/environments/kit/tar-entry';

const scratch: string[] = [];

async function scratchDir(): Promise<string> {
  const dir = await mkdtemp(path.join(tmpdir(), 'rollout-tar-entry-'));
  scratch.push(dir);
  return dir;
}

type EntryType = 'file' | 'directory' | 'symlink' | 'link' | 'character-device' | 'block-device' | 'fifo';

/** A tar as a hostile container could hand back, entries named freely; links point out of the folder. */
function archiveOf(entries: { name: string; type?: EntryType; text?: string }[]) {
  const pack = tarStream.pack();
  for (const { name, type = 'file', text = '' } of entries) {
    if (type === 'symlink' || type === 'link') pack.entry({ name, type, linkname: '/etc/passwd' });
    else if (type === 'file') pack.entry({ name }, text);
    else pack.entry({ name, type, devmajor: 1, devminor: 3 });
  }
  pack.finalize();
  return pack.pipe(new PassThrough());
}

describe('tarEntryTarget', () => {
  const root = path.resolve('/host/trial/logs');

  it('keeps regular files and folders below the archived name, which it drops', () => {
    assert.deepEqual(tarEntryTarget(root, { name: 'logs/agent/a.txt', type: 'file' }), {
      relative: 'agent/a.txt',
      target: path.join(root, 'agent', 'a.txt'),
    });
    assert.deepEqual(tarEntryTarget(root, { name: './logs/agent/', type: 'directory' }), {
      relative: 'agent',
      target: path.join(root, 'agent'),
    });
    assert.deepEqual(tarEntryTarget(root, { name: 'reward.txt', type: 'file' }), {
      relative: 'reward.txt',
      target: path.join(root, 'reward.txt'),
    });
  });

  it('writes nothing for the archived folder itself', () => {
    assert.equal(tarEntryTarget(root, { name: 'logs/', type: 'directory' }), undefined);
    assert.equal(tarEntryTarget(root, { name: 'logs/./', type: 'directory' }), undefined);
    assert.equal(tarEntryTarget(root, { name: 'logs/agent/..', type: 'directory' }), undefined);
  });

  it('refuses names that leave the folder', () => {
    for (const name of [
      'logs/../x.txt',
      'logs/../../x.txt',
      '../../x.txt',
      'logs/a/../../../x.txt',
      'logs/../../../../../etc/passwd',
    ]) {
      assert.equal(tarEntryTarget(root, { name, type: 'file' }), undefined, name);
    }
    assert.equal(tarEntryTarget(root, { name: 'logs/../../up', type: 'directory' }), undefined);
  });

  it('keeps an absolute name below the folder, never at its absolute place', () => {
    const kept = tarEntryTarget(root, { name: '/etc/passwd', type: 'file' });
    assert.deepEqual(kept, { relative: 'passwd', target: path.join(root, 'passwd') });
  });

  it('refuses links, devices, fifos and unknown kinds, wherever they point', () => {
    for (const type of ['symlink', 'link', 'character-device', 'block-device', 'fifo', 'contiguous-file', undefined]) {
      assert.equal(tarEntryTarget(root, { name: 'logs/agent/x', type }), undefined, String(type));
    }
  });
});

describe('extractArchive', () => {
  after(() => Promise.all(scratch.map((dir) => rm(dir, { recursive: true, force: true }))));

  it('writes nothing outside the target folder, whatever the entry names', async () => {
    const parent = await scratchDir();
    const target = path.join(parent, 'target');
    await extractArchive(
      archiveOf([
        { name: 'logs', type: 'directory' },
        { name: 'logs/ok.txt', text: 'ok' },
        { name: 'logs/../escaped.txt', text: 'escaped' },
        { name: 'logs/../../escaped2.txt', text: 'escaped' },
        { name: '../../escaped3.txt', text: 'escaped' },
        { name: 'logs/a/../../../escaped4.txt', text: 'escaped' },
        { name: 'logs/hard', type: 'link' },
        { name: 'logs/soft', type: 'symlink' },
        { name: 'logs/dir/./deep.txt', text: 'deep' },
        { name: '/etc/absolute.txt', text: 'escaped' },
        { name: 'logs//tmp/rooted.txt', text: 'rooted' },
        { name: 'logs/tty', type: 'character-device' },
        { name: 'logs/disk', type: 'block-device' },
        { name: 'logs/pipe', type: 'fifo' },
      ]),
      target
    );
    assert.deepEqual(await readdir(parent), ['target']);
    assert.deepEqual((await readdir(target)).sort(), ['absolute.txt', 'dir', 'ok.txt', 'tmp']);
    assert.equal(
      await readFile(path.join(target, 'tmp', 'rooted.txt'), 'utf8'),
      'rooted',
      'a doubled slash stays inside'
    );
    assert.equal(await readFile(path.join(target, 'absolute.txt'), 'utf8'), 'escaped', 'an absolute name lands inside');
    assert.equal(await readFile(path.join(target, 'dir', 'deep.txt'), 'utf8'), 'deep');
  });

  it('takes only the chosen folders, and stops (false) where one of them is not a folder', async () => {
    const selection = { folders: ['agent', 'verifier'], maxSkippedBytes: 100 };
    const target = await scratchDir();
    const complete = await extractArchive(
      archiveOf([
        { name: 'logs', type: 'directory' },
        { name: 'logs/agent', type: 'directory' },
        { name: 'logs/agent/a.txt', text: 'a' },
        { name: 'logs/artifacts/big.txt', text: 'x'.repeat(60) },
        { name: 'logs/trial.log', text: 'forged' },
        { name: 'logs/verifier/reward.txt', text: '1' },
        { name: 'logs/verifier-not/x.txt', text: 'x' },
        // Inside hostDir, but out of the chosen folders: the trial folder's own files.
        { name: 'logs/agent/../sandboxes.jsonl', text: 'forged' },
        { name: 'logs/verifier/x/../../trial.log', text: 'forged' },
      ]),
      target,
      undefined,
      '',
      selection
    );
    assert.equal(complete, true);
    assert.deepEqual((await readdir(target)).sort(), ['agent', 'verifier']);
    assert.equal(await readFile(path.join(target, 'verifier', 'reward.txt'), 'utf8'), '1');

    const fileForFolder = archiveOf([{ name: 'logs/agent', text: 'a file' }]);
    assert.equal(await extractArchive(fileForFolder, await scratchDir(), undefined, '', selection), false);
    const tooMuchElse = archiveOf([{ name: 'logs/other.bin', text: 'x'.repeat(101) }]);
    assert.equal(await extractArchive(tooMuchElse, await scratchDir(), undefined, '', selection), false);
  });

  it('reports the files it collected, not the folders holding them; the limit bounds both', async () => {
    const entries = [
      { name: 'logs', type: 'directory' as const },
      { name: 'logs/agent', type: 'directory' as const },
      { name: 'logs/agent/a.txt', text: 'a' },
      { name: 'logs/agent/b.txt', text: 'b' },
      { name: 'logs/verifier', type: 'directory' as const },
      { name: 'logs/verifier/reward.txt', text: '1' },
      { name: 'logs/verifier/test-stdout.txt', text: 'ok' },
    ];
    const budget = new CollectBudget({ maxFiles: 100, maxBytes: 1000 });
    await extractArchive(archiveOf(entries), await scratchDir(), budget);
    assert.deepEqual(budget.report(), { files: 4, bytes: 5, limit_reached: null, cut: [] });
    const tight = new CollectBudget({ maxFiles: 3, maxBytes: 1000 });
    await extractArchive(archiveOf(entries), await scratchDir(), tight);
    assert.deepEqual(tight.report(), { files: 2, bytes: 2, limit_reached: 'files', cut: ['verifier'] });
  });

  it('never writes through a link already on the host, in a folder or a file', async () => {
    const target = await scratchDir();
    const elsewhere = await scratchDir();
    await symlink(elsewhere, path.join(target, 'dir'));
    await writeFile(path.join(elsewhere, 'file.txt'), 'untouched');
    await symlink(path.join(elsewhere, 'file.txt'), path.join(target, 'file.txt'));
    await extractArchive(
      archiveOf([
        { name: 'logs/dir/inner.txt', text: 'inner' },
        { name: 'logs/file.txt', text: 'new' },
      ]),
      target
    );
    assert.deepEqual(await readdir(elsewhere), ['file.txt']);
    assert.equal(await readFile(path.join(elsewhere, 'file.txt'), 'utf8'), 'untouched');
    assert.ok((await lstat(path.join(target, 'dir'))).isDirectory());
    assert.equal(await readFile(path.join(target, 'file.txt'), 'utf8'), 'new');
    assert.equal((await stat(path.join(target, 'dir', 'inner.txt'))).size, 5);
  });
});
