/**
 * `rollout export <job> --format sft|sharegpt|atif|rl`: a job's trials (and its sessions and remote rollouts) as
 * JSONL for training. Trials are read one at a time and rows written as they are made, with the output's
 * backpressure, so a job of any size exports in constant memory. With `-o`, the file appears whole or not at all.
 */
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { createWriteStream } from 'node:fs';
import { rename, rm, stat } from 'node:fs/promises';
import path from 'node:path';
import type { Writable } from 'node:stream';

import { z } from 'zod';

import { ifPresent } from '../files/absent';
import { InputError } from '../contracts/errors';
import { jobFiles } from '../results/files';
import { SESSION_AGENT } from '../contracts/session';
import { atifRows } from './atif';
import type { ExportContext, ExportFormat } from './format';
import { rlRows } from './rl';
import { sftRows } from './sft';
import { sharegptRows } from './sharegpt';
import { jobTrials, readInputJson } from './trials';

export const EXPORT_FORMATS: Record<string, ExportFormat> = {
  sft: sftRows,
  sharegpt: sharegptRows,
  atif: atifRows,
  rl: rlRows,
};

export interface ExportOptions {
  format?: string;
  minReward?: string;
  agent?: string;
  episodes?: string;
  output?: string;
}

export interface ExportCounts {
  trials: number;
  rows: number;
  /** Trials that matched the filters but had nothing for this format (no model calls, no trajectory). */
  empty: number;
}

const ARGS = 'rollout export';

export async function exportJob(jobDir: string, options: ExportOptions, stdout: Writable): Promise<ExportCounts> {
  const { format, filter, context } = await checkOptions(jobDir, options);
  if (!options.output) return writeRows(jobDir, format, filter, context, stdout);
  const output = path.resolve(options.output);
  const temporary = `${output}.${randomBytes(4).toString('hex')}.tmp`;
  const file = createWriteStream(temporary);
  try {
    const counts = await writeRows(jobDir, format, filter, context, file);
    file.end();
    await once(file, 'finish');
    await rename(temporary, output);
    return counts;
  } catch (err) {
    // Pending writes finish before the close: the half-written file is then removed, whatever was there kept.
    await new Promise((resolve) => file.close(resolve));
    await rm(temporary, { force: true });
    throw err;
  }
}

async function writeRows(
  jobDir: string,
  format: ExportFormat,
  filter: { minReward?: number; agent?: string },
  context: ExportContext,
  out: Writable
): Promise<ExportCounts> {
  const counts: ExportCounts = { trials: 0, rows: 0, empty: 0 };
  for await (const trial of jobTrials(jobDir, filter)) {
    counts.trials += 1;
    const before = counts.rows;
    for await (const piece of format(trial, context)) {
      if (piece.endsWith('\n')) counts.rows += 1;
      if (!out.write(piece)) await once(out, 'drain');
    }
    if (counts.rows === before) counts.empty += 1;
  }
  return counts;
}

const ConfigAgentsSchema = z.looseObject({ agents: z.array(z.looseObject({ name: z.string() })) });

/** Every problem with the arguments, found before anything is written. */
async function checkOptions(jobDir: string, options: ExportOptions) {
  const format = options.format === undefined ? undefined : EXPORT_FORMATS[options.format];
  if (!format) {
    throw new InputError([
      {
        file: ARGS,
        field: '--format',
        message: `${options.format === undefined ? 'missing' : `unknown format "${options.format}"`}: one of ${Object.keys(EXPORT_FORMATS).join(', ')}`,
      },
    ]);
  }
  const episodes = options.episodes ?? 'all';
  if (episodes !== 'all' && episodes !== 'last') {
    throw new InputError([{ file: ARGS, field: '--episodes', message: `"${episodes}": one of all, last` }]);
  }
  const minReward = options.minReward === undefined ? undefined : Number(options.minReward);
  if (minReward !== undefined && (options.minReward!.trim() === '' || !Number.isFinite(minReward))) {
    throw new InputError([{ file: ARGS, field: '--min-reward', message: `"${options.minReward}" is not a number` }]);
  }
  const info = await ifPresent(stat(jobDir));
  if (!info?.isDirectory()) throw new InputError([{ file: jobDir, message: 'no such job folder' }]);
  const config = await readInputJson(jobFiles.config(jobDir), ConfigAgentsSchema);
  if (!config) throw new InputError([{ file: jobDir, message: 'not a job folder (it has no config.json)' }]);
  if (options.agent !== undefined) {
    const agents = [...config.agents.map((a) => a.name), SESSION_AGENT];
    if (!agents.includes(options.agent)) {
      throw new InputError([
        {
          file: ARGS,
          field: '--agent',
          message: `no agent "${options.agent}" in ${jobFiles.config(jobDir)}: one of ${agents.join(', ')}`,
        },
      ]);
    }
  }
  if (options.output) {
    const dir = await ifPresent(stat(path.dirname(path.resolve(options.output))));
    if (!dir?.isDirectory())
      throw new InputError([{ file: ARGS, field: '-o', message: `no folder for ${options.output}` }]);
  }
  return {
    format,
    filter: { ...(minReward !== undefined ? { minReward } : {}), ...(options.agent ? { agent: options.agent } : {}) },
    context: { episodes: episodes === 'last' ? 'last' : 'all' } satisfies ExportContext,
  };
}
