/**
 * `<trial>/sandboxes.jsonl`: which sandboxes (containers, pods, cloud sandboxes) the trial's attempts created, kept
 * in the trial folder as it happens. A line names the labels a sandbox is about to be created with (before the
 * provider's create call, so a worker killed during it leaves a sandbox its labels find), then its id once created,
 * then that it was removed. A later attempt, on any host, removes what an earlier one left (see activities/start.ts
 * and activities/cleanup.ts): the record outlives the worker, and the Temporal history only learns the id once the
 * start step completes.
 */
import { appendFile, mkdir, readFile } from 'node:fs/promises';
import path from 'node:path';

import { z } from 'zod';

import { trialLayout } from '../contracts/paths';
import { isStoreUrl } from '../storage/location';
import { jobFiles } from './files';

const RecordLine = z.discriminatedUnion('event', [
  z.object({
    event: z.literal('creating'),
    /** The worker host (its task queue's host id) that creates it. */
    host: z.string(),
    labels: z.record(z.string(), z.string()),
    at: z.string(),
  }),
  z.object({ event: z.literal('created'), host: z.string(), id: z.string(), at: z.string() }),
  z.object({ event: z.literal('removed'), id: z.string(), at: z.string() }),
]);
export type SandboxRecordLine = z.infer<typeof RecordLine>;
/** A line as a writer gives it: the time is added when it is written. */
type NewRecordLine = SandboxRecordLine extends infer L ? (L extends SandboxRecordLine ? Omit<L, 'at'> : never) : never;

/** A sandbox the record says was created and not yet removed. */
export interface RecordedSandbox {
  id: string;
  host: string;
}

function recordFile(jobDir: string, trialName: string): string {
  return trialLayout(jobFiles.trialDir(jobDir, trialName)).sandboxes;
}

/** Appends one event (its time added) to the trial's record. */
export async function recordSandbox(jobDir: string, trialName: string, line: NewRecordLine): Promise<void> {
  const file = recordFile(jobDir, trialName);
  await mkdir(path.dirname(file), { recursive: true });
  await appendFile(file, `${JSON.stringify({ ...line, at: new Date().toISOString() })}\n`);
}

/** What a trial's record says: what was created and not removed, and whether every sandbox is accounted for. */
export interface SandboxRecordState {
  /** Created and not removed, oldest first. */
  live: RecordedSandbox[];
  /** No line at all: no creation was ever begun for the trial. */
  empty: boolean;
  /**
   * Every creation begun has its id and every created sandbox was removed, and no line was cut short: nothing of the
   * trial's is left that only a listing by its labels would find.
   */
  settled: boolean;
}

/**
 * The trial's record read. No record, for a job on disk: empty and settled. A line that is not one of ours (a write
 * cut short by a crash) is skipped, and the record is not settled: the labels still find what it was about. A job in
 * an object store keeps the record in this host's working folder until the trial's folder is uploaded, so an attempt
 * on a host that died took its lines along: there the record is never empty nor settled, only a listing tells.
 */
export async function sandboxRecordState(jobDir: string, trialName: string): Promise<SandboxRecordState> {
  let text: string;
  try {
    text = await readFile(recordFile(jobDir, trialName), 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    text = '';
  }
  const live = new Map<string, RecordedSandbox>();
  let unnamedCreations = 0;
  let cutShort = false;
  const lines = text.split('\n').filter((raw) => raw !== '');
  for (const raw of lines) {
    const parsed = RecordLine.safeParse(safeJson(raw));
    if (!parsed.success) {
      cutShort = true;
      continue;
    }
    const line = parsed.data;
    if (line.event === 'creating') unnamedCreations += 1;
    if (line.event === 'created') {
      unnamedCreations -= 1;
      live.set(line.id, { id: line.id, host: line.host });
    }
    if (line.event === 'removed') live.delete(line.id);
  }
  const wholeHistory = !isStoreUrl(jobDir);
  return {
    live: [...live.values()],
    empty: wholeHistory && lines.length === 0,
    settled: wholeHistory && !cutShort && unnamedCreations <= 0 && live.size === 0,
  };
}

/** The sandboxes the trial's record says were created and not removed, oldest first (see sandboxRecordState). */
export async function recordedSandboxes(jobDir: string, trialName: string): Promise<RecordedSandbox[]> {
  return (await sandboxRecordState(jobDir, trialName)).live;
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return null; // a line cut short by a crash
  }
}
