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

/**
 * The sandboxes the trial's record says were created and not removed, oldest first. No record: none. A line that is
 * not one of ours (a write cut short by a crash) is skipped: the labels still find what it was about.
 */
export async function recordedSandboxes(jobDir: string, trialName: string): Promise<RecordedSandbox[]> {
  let text: string;
  try {
    text = await readFile(recordFile(jobDir, trialName), 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw err;
  }
  const live = new Map<string, RecordedSandbox>();
  for (const raw of text.split('\n')) {
    const parsed = raw ? RecordLine.safeParse(safeJson(raw)) : null;
    if (!parsed?.success) continue;
    const line = parsed.data;
    if (line.event === 'created') live.set(line.id, { id: line.id, host: line.host });
    if (line.event === 'removed') live.delete(line.id);
  }
  return [...live.values()];
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return null; // a line cut short by a crash
  }
}
