/**
 * `rollout view --bundle <dir>`: the viewer's pages as a static site (open index.html, or serve the folder): jobs,
 * every job with all its trials, every trial with its files, and a comparison of every pair of agents in a job.
 * Relative links throughout, so the folder works from anywhere, as a CI artifact too.
 */
import { createWriteStream } from 'node:fs';
import { mkdir, readdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';

import { isPathSegment } from '../files/inside';
import { openRegularFile } from '../files/no-follow';
import { log } from '../log';
import { readTrialRows } from './data';
import type { LinkContext } from './html';
import { ASSET_NAMES, Site, readAsset, temporalUi, trialFolder } from './site';

function bundleContext(depth: number): LinkContext {
  const ui = temporalUi();
  const up = '../'.repeat(depth);
  const encode = (segments: readonly string[]) => segments.map(encodeURIComponent).join('/');
  return {
    // Filters and pages need the server; a bundle's job page lists every trial (tables still sort).
    href: (segments) => `${up}${encode(segments)}${segments.length ? '/' : ''}index.html`,
    // Raw files end in .txt (copyRawFiles): hosted, an agent's x.html or x.svg is text, never a page of the site.
    file: (segments) => `${up}${encode(segments)}${RAW_SUFFIX}`,
    asset: (name) => `${up}assets/${name}`,
    live: false,
    temporalUiUrl: ui.url,
    temporalNamespace: ui.namespace,
  };
}

/** Appended to every file an agent or a task wrote, so a hosted bundle serves none of them as a page or a script. */
const RAW_SUFFIX = '.txt';

/**
 * The regular files under `from`, copied to `to` with RAW_SUFFIX appended: links (which could lead anywhere on this
 * machine), FIFOs and devices are left out, and nothing is followed.
 */
async function copyRawFiles(from: string, to: string): Promise<void> {
  const entries = await readdir(from, { withFileTypes: true }).catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT') return [];
    throw err;
  });
  for (const entry of entries) {
    const source = path.join(from, entry.name);
    if (entry.isDirectory()) await copyRawFiles(source, path.join(to, entry.name));
    if (!entry.isFile()) continue;
    const opened = await openRegularFile(source);
    if (!opened) continue;
    await mkdir(to, { recursive: true });
    await pipeline(opened.handle.createReadStream(), createWriteStream(path.join(to, entry.name + RAW_SUFFIX)));
  }
}

export async function writeBundle(root: string, out: string): Promise<{ pages: number }> {
  const site = new Site(root);
  let pages = 0;
  const write = async (segments: string[], body: string) => {
    const dir = path.join(out, ...segments);
    await mkdir(dir, { recursive: true });
    await writeFile(path.join(dir, 'index.html'), body);
    pages += 1;
  };
  await mkdir(path.join(out, 'assets'), { recursive: true });
  for (const name of ASSET_NAMES) await writeFile(path.join(out, 'assets', name), (await readAsset(name))!.body);

  await write([], await site.jobs(bundleContext(0)));
  for (const [job, dir] of await site.jobDirs()) {
    // Names become folders of the bundle: a job folder's own names may come from anyone.
    if (!isPathSegment(job)) {
      log.warn(`${dir}: left out of the bundle (its name cannot be a folder name)`);
      continue;
    }
    await write(['jobs', job], await site.job(bundleContext(2), job));
    const rows = await readTrialRows(dir);
    for (const row of rows) {
      await write(
        ['jobs', job, 'trials', row.trialName],
        await site.trial(bundleContext(4), job, row.trialName, [row])
      );
      const trialDir = await trialFolder(dir, row.trialName);
      if (trialDir) await copyRawFiles(trialDir, path.join(out, 'jobs', job, 'trials', row.trialName, 'files'));
    }
    const agents = [...new Set(rows.map((row) => row.agentName))].filter(isPathSegment).sort();
    for (let i = 0; i < agents.length; i++)
      for (let j = i + 1; j < agents.length; j++) {
        const [a, b] = [agents[i]!, agents[j]!];
        await write(['compare', job, a, job, b], await site.compare(bundleContext(5), job, a, job, b));
      }
  }
  return { pages };
}
