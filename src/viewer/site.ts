/**
 * The viewer's routes, shared by the live server and the static bundle: each takes a link context and returns a
 * page, reading only what that page needs from the job folders.
 */
import { lstat, readFile } from 'node:fs/promises';
import path from 'node:path';

import { ifPresent } from '../files/absent';
import { childFolder } from '../files/inside';
import type { FileHandle } from 'node:fs/promises';
import { openRegularFile, pathThroughFolders, readRegularHead } from '../files/no-follow';

import { devServerConfig } from '../temporal/dev-server';
import type { JobSummary, TrialFilter, TrialRow } from './data';
import {
  evalsOf,
  filterRows,
  findJobDirs,
  readHead,
  readJobSummary,
  readTrialRows,
  trialFiles,
  usageByAgent,
} from './data';
import type { LinkContext } from './html';
import type { ShownFile } from './pages/trial';
import { comparePage } from './pages/compare';
import { jobPage } from './pages/job';
import { jobsPage } from './pages/jobs';
import { notFoundPage } from './pages/shared';
import { trialPage } from './pages/trial';
import { STYLE_CSS, VIEWER_JS } from './assets';
import { readTrajectory } from './trajectory';
import { loadTemporalProfile } from '../temporal/envconfig';

/** A file's first bytes shown on its trial page; the whole file is a download away. */
const FILE_HEAD_BYTES = 64 * 1024;
/**
 * A trial page's bounds: the agent chooses how many files its trial holds (up to collect_max_files), so a page shows
 * the heads of the first files only, at most this many bytes of them in all, and lists at most this many files.
 */
const PAGE_FILE_HEADS = 100;
const PAGE_HEAD_BYTES = 2 * 2 ** 20;
const PAGE_FILES_LISTED = 2000;
/** A task's instruction shown on a trial page, at most. */
const INSTRUCTION_BYTES = 256 * 1024;

/**
 * A trial's folder in a job folder: its name a folder name inside the job folder (src/files/inside.ts) and the
 * folder itself a real folder, not a link (a job folder may come from anyone: a shared bucket, a CI artifact).
 */
export async function trialFolder(jobDir: string, trialName: string): Promise<string | undefined> {
  const dir = childFolder(jobDir, trialName);
  if (dir === undefined) return undefined;
  return (await ifPresent(lstat(dir)))?.isDirectory() ? dir : undefined;
}

/**
 * The instruction of the task a result names (`task_dir`), read only from what looks like a task folder: an
 * absolute, normalized path holding task.toml, both files regular files, never through a link.
 */
async function taskInstruction(taskDir: unknown): Promise<string | undefined> {
  if (typeof taskDir !== 'string' || !path.isAbsolute(taskDir) || taskDir.includes('\u0000')) return undefined;
  if (path.normalize(taskDir).replace(/\/+$/, '') !== taskDir.replace(/\/+$/, '')) return undefined;
  const toml = await openRegularFile(path.join(taskDir, 'task.toml'));
  if (!toml) return undefined;
  await toml.handle.close();
  return (await readRegularHead(path.join(taskDir, 'instruction.md'), INSTRUCTION_BYTES))?.text;
}

export class NotFound extends Error {}

export class Site {
  constructor(readonly root: string) {}

  /** Job folders by URL name (the folder's name). */
  async jobDirs(): Promise<Map<string, string>> {
    return new Map((await findJobDirs(this.root)).map((dir) => [path.basename(dir), dir]));
  }

  async jobDir(name: string): Promise<string> {
    const dir = (await this.jobDirs()).get(name);
    if (!dir) throw new NotFound(`no job "${name}" in ${this.root}`);
    return dir;
  }

  async jobs(ctx: LinkContext): Promise<string> {
    const summaries: JobSummary[] = [];
    for (const [name, dir] of await this.jobDirs()) summaries.push({ ...(await readJobSummary(dir)), name });
    summaries.sort((a, b) => (b.result?.started_at ?? '').localeCompare(a.result?.started_at ?? ''));
    return jobsPage(ctx, this.root, summaries);
  }

  async job(
    ctx: LinkContext,
    name: string,
    options: { filter?: TrialFilter; page?: number; matrixPage?: number } = {}
  ): Promise<string> {
    const dir = await this.jobDir(name);
    const job = { ...(await readJobSummary(dir)), name };
    const rows = await readTrialRows(dir);
    const filter = options.filter ?? {};
    const otherJobs: { name: string; agents: string[] }[] = [];
    if (ctx.live) {
      for (const [other, otherDir] of await this.jobDirs()) {
        if (other === name) continue;
        const summary = await readJobSummary(otherDir);
        otherJobs.push({ name: other, agents: (summary.config?.agents ?? []).map((a) => a.name) });
      }
    }
    return jobPage(ctx, {
      job,
      rows,
      evals: evalsOf(
        rows,
        (job.config?.metrics ?? [{ type: 'mean' }]).map((m) => m.type)
      ),
      filter,
      filtered: filterRows(rows, filter),
      page: options.page ?? 1,
      matrixPage: options.matrixPage ?? 1,
      usage: usageByAgent(rows),
      otherJobs,
    });
  }

  async compare(ctx: LinkContext, aJob: string, aAgent: string, bJob: string, bAgent: string): Promise<string> {
    const side = async (job: string, agent: string) => {
      const rows = await readTrialRows(await this.jobDir(job));
      if (!rows.some((row) => row.agentName === agent)) throw new NotFound(`job "${job}" has no agent "${agent}"`);
      return { job, agent, rows };
    };
    return comparePage(ctx, await side(aJob, aAgent), await side(bJob, bAgent));
  }

  /** `rows`: the job's trials when the caller already read them (the bundle renders every trial). */
  async trial(ctx: LinkContext, jobName: string, trialName: string, rows?: TrialRow[]): Promise<string> {
    const dir = await this.jobDir(jobName);
    const row = (rows ?? (await readTrialRows(dir))).find((r) => r.trialName === trialName);
    if (!row) throw new NotFound(`job "${jobName}" has no trial "${trialName}"`);
    const trialDir = await trialFolder(dir, trialName);
    const listed = trialDir ? await trialFiles(trialDir) : [];
    const files: ShownFile[] = [];
    let headBytes = 0;
    let heads = 0;
    for (const file of listed.slice(0, PAGE_FILES_LISTED)) {
      const room = Math.min(FILE_HEAD_BYTES, PAGE_HEAD_BYTES - headBytes);
      const shown = heads < PAGE_FILE_HEADS && room > 0;
      const head = shown ? await readHead(path.join(trialDir!, file.path), room) : undefined;
      const isText = head !== undefined && !head.text.includes('\u0000');
      if (isText) {
        heads += 1;
        headBytes += Buffer.byteLength(head.text);
      }
      files.push({
        ...file,
        head: isText ? head.text : undefined,
        truncated: isText && file.size > room,
        notShown: !shown,
      });
    }
    return trialPage(ctx, {
      jobName,
      row,
      instruction: await taskInstruction(row.result?.task_dir),
      files,
      moreFiles: Math.max(0, listed.length - PAGE_FILES_LISTED),
      trajectory: trialDir ? await readTrajectory(trialDir) : undefined,
    });
  }

  /**
   * A file inside a trial folder, opened for reading; never outside it: no `..`, no link on the way or at the end
   * (O_NOFOLLOW), a regular file only. The caller closes the handle.
   */
  async openTrialFile(
    jobName: string,
    trialName: string,
    relative: string[]
  ): Promise<{ handle: FileHandle; size: number }> {
    const trialDir = await trialFolder(await this.jobDir(jobName), trialName);
    const file = trialDir ? await pathThroughFolders(trialDir, relative) : undefined;
    const opened = file ? await openRegularFile(file) : undefined;
    if (!opened) throw new NotFound('no such file');
    return opened;
  }

  notFound(ctx: LinkContext, message: string): string {
    return notFoundPage(ctx, message);
  }
}

/**
 * Where trial pages link for "open in the Temporal UI": TEMPORAL_UI_URL, else the local dev server's UI unless
 * Temporal's environment configuration names another server.
 */
export function temporalUi(env: NodeJS.ProcessEnv = process.env): { url: string | null; namespace: string } {
  const { namespace, address } = loadTemporalProfile(env);
  if (env.TEMPORAL_UI_URL) return { url: env.TEMPORAL_UI_URL.replace(/\/$/, ''), namespace };
  if (address) return { url: null, namespace };
  const config = devServerConfig(env);
  return { url: `http://${config.ip}:${config.uiPort}`, namespace };
}

/** The pages' static files: tablesort (table sorting) from its package, and the viewer's own stylesheet and script. */
export async function readAsset(name: string): Promise<{ body: string; type: string } | undefined> {
  const js = 'text/javascript; charset=utf-8';
  if (name === 'style.css') return { body: STYLE_CSS, type: 'text/css; charset=utf-8' };
  if (name === 'viewer.js') return { body: VIEWER_JS, type: js };
  const file = { 'tablesort.min.js': 'tablesort.min.js', 'tablesort.number.min.js': 'sorts/tablesort.number.min.js' }[
    name
  ];
  if (!file) return undefined;
  return { body: await readFile(require.resolve(`tablesort/dist/${file}`), 'utf8'), type: js };
}

export const ASSET_NAMES = ['style.css', 'viewer.js', 'tablesort.min.js', 'tablesort.number.min.js'];
