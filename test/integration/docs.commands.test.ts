/**
 * The docs' offline commands, run as written: every ```sh block of README.md and docs/*.md that follows the marker
 * `<!-- docs-test: offline -->` runs with bash (`set -e`) in a temporary folder holding a copy of examples/, with
 * `rollout` on PATH as `npm link` puts it there, and must exit 0. Only marked blocks run, so a new doc's commands
 * (which may need keys, a cluster or a cloud) never break this test; mark a block once it runs offline in seconds.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { cp, mkdir, mkdtemp, readFile, readdir, rm, symlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import { REPO_ROOT } from '../support/temporal';

const MARKER = '<!-- docs-test: offline -->';

interface Block {
  file: string;
  line: number;
  script: string;
}

/** The marked blocks of one Markdown file: the marker, optionally blank lines, then a ```sh fence. */
function markedBlocks(file: string, text: string): Block[] {
  const lines = text.split('\n');
  const blocks: Block[] = [];
  for (let i = 0; i < lines.length; i++) {
    if (lines[i]!.trim() !== MARKER) continue;
    let start = i + 1;
    while (lines[start]?.trim() === '') start++;
    assert.equal(lines[start]?.trim(), '```sh', `${file}:${i + 1}: the marker must precede a \`\`\`sh block`);
    const end = lines.findIndex((line, index) => index > start && line.trim() === '```');
    assert.ok(end > start, `${file}:${start + 1}: unclosed block`);
    blocks.push({ file, line: start + 1, script: lines.slice(start + 1, end).join('\n') });
  }
  return blocks;
}

async function docFiles(): Promise<string[]> {
  const docs = (await readdir(path.join(REPO_ROOT, 'docs'))).filter((name) => name.endsWith('.md'));
  return ['README.md', ...docs.map((name) => path.join('docs', name))];
}

describe('docs: offline commands run as written', () => {
  let dir: string;
  let bin: string;
  before(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'rollout-docs-'));
    bin = path.join(dir, '.bin');
    await mkdir(bin);
    // What `npm link` does: `rollout` on PATH, linked to this checkout's bin/rollout.js.
    await symlink(path.join(REPO_ROOT, 'bin', 'rollout.js'), path.join(bin, 'rollout'));
  });
  after(() => rm(dir, { recursive: true, force: true }));

  it('README.md and docs/*.md: every marked block exits 0', async () => {
    const blocks: Block[] = [];
    for (const file of await docFiles()) {
      blocks.push(...markedBlocks(file, await readFile(path.join(REPO_ROOT, file), 'utf8')));
    }
    assert.ok(
      blocks.some((block) => block.file === 'README.md'),
      'README.md has marked blocks'
    );
    for (const block of blocks) {
      // A fresh copy for each block, in a folder like a checkout's: examples/ as shipped.
      const cwd = path.join(dir, `${path.basename(block.file, '.md')}-${block.line}`);
      await cp(path.join(REPO_ROOT, 'examples'), path.join(cwd, 'examples'), { recursive: true });
      const run = spawnSync('bash', ['-e', '-o', 'pipefail', '-c', block.script], {
        cwd,
        encoding: 'utf8',
        timeout: 120_000,
        env: { ...process.env, PATH: `${bin}${path.delimiter}${process.env.PATH ?? ''}` },
      });
      assert.equal(run.status, 0, `${block.file}:${block.line}: exit ${run.status}\n${run.stdout}\n${run.stderr}`);
    }
  });

  it('rollout --version names our package, not npm\'s unrelated "rollout"', () => {
    const run = spawnSync(path.join(bin, 'rollout'), ['--version'], { encoding: 'utf8' });
    assert.equal(run.status, 0, run.stderr);
    assert.equal(run.stdout.trim(), 'rollout-agents 0.1.0');
  });
});
