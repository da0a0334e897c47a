/**
 * `rollout view --bundle <dir>`: the viewer's pages as a static site (open index.html, or serve the folder): jobs,
 * every job with all its trials, every trial with its files, and a comparison of every pair of agents in a job.
 * Relative links throughout, so the folder works from anywhere, as a CI artifact too.
 */
import { cp, mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';

import { readTrialRows } from './data';
import type { LinkContext } from './html';
import { ASSET_NAMES, Site, readAsset, temporalUi } from './site';

function bundleContext(depth: number): LinkContext {
  const ui = temporalUi();
  const up = '../'.repeat(depth);
  const encode = (segments: readonly string[]) => segments.map(encodeURIComponent).join('/');
  return {
    // Filters and pages need the server; a bundle's job page lists every trial (tables still sort).
    href: (segments) => `${up}${encode(segments)}${segments.length ? '/' : ''}index.html`,
    file: (segments) => up + encode(segments),
    asset: (name) => `${up}assets/${name}`,
    live: false,
    temporalUiUrl: ui.url,
    temporalNamespace: ui.namespace,
  };
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
    await write(['jobs', job], await site.job(bundleContext(2), job));
    const rows = await readTrialRows(dir);
    for (const row of rows) {
      await write(
        ['jobs', job, 'trials', row.trialName],
        await site.trial(bundleContext(4), job, row.trialName, [row])
      );
      await cp(path.join(dir, row.trialName), path.join(out, 'jobs', job, 'trials', row.trialName, 'files'), {
        recursive: true,
        verbatimSymlinks: true,
      }).catch((err: NodeJS.ErrnoException) => {
        if (err.code !== 'ENOENT') throw err;
      });
    }
    const agents = [...new Set(rows.map((row) => row.agentName))].sort();
    for (let i = 0; i < agents.length; i++)
      for (let j = i + 1; j < agents.length; j++) {
        const [a, b] = [agents[i]!, agents[j]!];
        await write(['compare', job, a, job, b], await site.compare(bundleContext(5), job, a, job, b));
      }
  }
  return { pages };
}
