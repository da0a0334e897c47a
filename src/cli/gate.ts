/**
 * The CI gate: thresholds on a job's metrics (`--fail-under`), a bound on errored trials (`--max-errors`) and a
 * JUnit XML report with one test case per trial (`--junit`). The verdict comes from the results on disk, so it
 * works the same on a job that just ran and on one that finished long ago.
 */
import { InputError } from '../contracts/errors';
import { writeFileAtomic } from '../files/atomic';
import { readJobTrials } from '../results/job-folder';
import type { JobResult } from '../results/job-result';
import type { RewardMetrics } from '../results/job-stats';
import { primaryKey, primaryReward } from '../results/job-stats';
import { CANCELLED_ERROR } from '../contracts/trial';
import { readableFolder } from './stored-jobs';

/** Exit code of a job whose results miss a threshold (2 bad input and 3 infrastructure take precedence). */
export const EXIT_GATE_FAILED = 4;

export interface Threshold {
  /** The reward key; undefined: each eval's primary key. */
  key?: string;
  /** mean, sum, min, max, ci95_low, ci95_high or pass@<k>. */
  statistic: string;
  min: number;
  spec: string;
}

export interface GateOptions {
  failUnder: Threshold[];
  maxErrors?: number;
  junit?: string;
  passThreshold: number;
}

const STATISTIC = /^(mean|sum|min|max|ci95_low|ci95_high|pass@[1-9][0-9]*)$/;

/** `0.8`, `reward=0.8`, `reward:pass@3=0.9`: the key, the statistic (mean by default) and the lowest value accepted. */
export function parseThreshold(spec: string): Threshold {
  const match = /^(?:([^=:]+)(?::([^=]+))?=)?([^=]+)$/.exec(spec.trim());
  const min = Number(match?.[3]);
  const statistic = match?.[2] ?? 'mean';
  if (!match || match[3]?.trim() === '' || !Number.isFinite(min) || !STATISTIC.test(statistic)) {
    throw new InputError([
      {
        file: 'command line',
        field: '--fail-under',
        message: `"${spec}": expected [<reward key>[:<mean|sum|min|max|ci95_low|ci95_high|pass@k>]=]<number>`,
      },
    ]);
  }
  return { ...(match[1] ? { key: match[1] } : {}), statistic, min, spec };
}

export function parseGateOptions(options: {
  failUnder?: string[];
  maxErrors?: string;
  junit?: string;
  passThreshold?: string;
}): GateOptions {
  const number = (field: string, value: string | undefined, check: (n: number) => boolean, expected: string) => {
    if (value === undefined) return undefined;
    const n = Number(value);
    if (value.trim() === '' || !check(n)) {
      throw new InputError([{ file: 'command line', field, message: `"${value}": expected ${expected}` }]);
    }
    return n;
  };
  const maxErrors = number('--max-errors', options.maxErrors, (n) => Number.isInteger(n) && n >= 0, 'a whole number');
  return {
    failUnder: (options.failUnder ?? []).map(parseThreshold),
    ...(maxErrors !== undefined ? { maxErrors } : {}),
    ...(options.junit ? { junit: options.junit } : {}),
    passThreshold: number('--pass-threshold', options.passThreshold, Number.isFinite, 'a number') ?? 1,
  };
}

export function gateRequested(gate: GateOptions): boolean {
  return gate.failUnder.length > 0 || gate.maxErrors !== undefined || gate.junit !== undefined;
}

export interface Verdict {
  passed: boolean;
  lines: string[];
}

/** Checks every threshold against every eval that reports its key; a key no eval reports is bad input. */
export function judge(
  result: Pick<JobResult, 'evals' | 'n_errored_trials' | 'n_infrastructure_errors'>,
  gate: GateOptions
): Verdict {
  const lines: string[] = [];
  let passed = true;
  for (const threshold of gate.failUnder) {
    let checked = 0;
    for (const [name, evaluation] of Object.entries(result.evals)) {
      const key = threshold.key ?? primaryKey(Object.keys(evaluation.metrics));
      const metrics = evaluation.metrics[key];
      if (!metrics) continue;
      checked += 1;
      const value = statisticOf(metrics, threshold.statistic);
      const ok = value !== undefined && value >= threshold.min;
      passed &&= ok;
      lines.push(
        `${ok ? 'pass' : 'FAIL'}  ${name} ${key} ${threshold.statistic} ${value === undefined ? missing(threshold.statistic) : value.toFixed(4)} ` +
          `${ok ? '≥' : '<'} ${threshold.min}`
      );
    }
    if (checked === 0) {
      throw new InputError([
        { file: 'command line', field: '--fail-under', message: `"${threshold.spec}": no eval reports that key` },
      ]);
    }
  }
  if (gate.maxErrors !== undefined) {
    const errors = result.n_errored_trials + result.n_infrastructure_errors;
    const ok = errors <= gate.maxErrors;
    passed &&= ok;
    lines.push(`${ok ? 'pass' : 'FAIL'}  errored trials ${errors} ${ok ? '≤' : '>'} ${gate.maxErrors}`);
  }
  return { passed, lines };
}

/** Why a statistic has no value: an interval needs enough tasks (docs/results.md), pass@k that many attempts. */
function missing(statistic: string): string {
  return statistic.startsWith('ci95') ? 'n/a (too few tasks for an honest interval)' : 'n/a';
}

function statisticOf(metrics: RewardMetrics, statistic: string): number | undefined {
  if (statistic === 'ci95_low') return metrics.ci95?.[0];
  if (statistic === 'ci95_high') return metrics.ci95?.[1];
  if (statistic.startsWith('pass@')) return metrics.pass_at_k?.[statistic.slice('pass@'.length)];
  return metrics[statistic as 'mean' | 'sum' | 'min' | 'max'];
}

/**
 * JUnit XML: a test suite per agent × dataset, a test case per trial. An errored trial is an error, a primary reward
 * below the pass threshold a failure; trials that have not finished (or were cancelled) are skipped.
 */
export async function writeJunit(file: string, jobDir: string, jobName: string, passThreshold: number): Promise<void> {
  const suites = new Map<string, string[]>();
  const counts = new Map<string, { tests: number; failures: number; errors: number; skipped: number }>();
  // A job in an object store: its trials' result.json files, copied to this host (nothing else of them).
  for (const trial of await readJobTrials(await readableFolder(jobDir, 'results'))) {
    const suite = `${trial.agentName}__${trial.datasetName}`;
    const count = counts.get(suite) ?? { tests: 0, failures: 0, errors: 0, skipped: 0 };
    counts.set(suite, count);
    count.tests += 1;
    const { result } = trial;
    const seconds = result ? (Date.parse(result.finished_at) - Date.parse(result.started_at)) / 1000 : 0;
    const open = `<testcase classname="${xml(`${jobName}.${suite}`)}" name="${xml(trial.trialName)}" time="${Number.isFinite(seconds) ? seconds.toFixed(3) : 0}">`;
    let body: string;
    if (!result || result.error?.type === CANCELLED_ERROR) {
      count.skipped += 1;
      body = `<skipped message="${result ? 'cancelled' : 'not finished'}"/>`;
    } else if (result.error) {
      count.errors += 1;
      const { type, message, step } = result.error;
      body = `<error type="${xml(type)}" message="${xml(`${type} in ${step}: ${message}`)}"/>`;
    } else {
      const reward = primaryReward(result.rewards) ?? 0;
      if (reward < passThreshold) {
        count.failures += 1;
        // Named by its key: a reward.json task's primary key is its first (e.g. `lines`), not `reward`.
        const keys = Object.keys(result.rewards ?? {});
        const key = keys.length > 0 ? primaryKey(keys) : 'no reward';
        body = `<failure type="reward" message="${xml(`${key} ${reward} < ${passThreshold}`)}"/>`;
      } else body = '';
    }
    (suites.get(suite) ?? suites.set(suite, []).get(suite)!).push(`    ${open}${body}</testcase>`);
  }
  const total = { tests: 0, failures: 0, errors: 0, skipped: 0 };
  const parts: string[] = [];
  for (const [suite, cases] of suites) {
    const c = counts.get(suite)!;
    for (const k of ['tests', 'failures', 'errors', 'skipped'] as const) total[k] += c[k];
    parts.push(
      `  <testsuite name="${xml(suite)}" tests="${c.tests}" failures="${c.failures}" errors="${c.errors}" skipped="${c.skipped}">`,
      ...cases,
      '  </testsuite>'
    );
  }
  await writeFileAtomic(
    file,
    [
      '<?xml version="1.0" encoding="UTF-8"?>',
      `<testsuites name="${xml(jobName)}" tests="${total.tests}" failures="${total.failures}" errors="${total.errors}" skipped="${total.skipped}">`,
      ...parts,
      '</testsuites>',
      '',
    ].join('\n')
  );
}

/** Attribute-safe text: XML's five escapes, and no control characters XML 1.0 forbids. */
function xml(text: string): string {
  return (
    text
      // eslint-disable-next-line no-control-regex -- removing exactly these control characters is the point
      .replace(/[\u0000-\u0008\u000b\u000c\u000e-\u001f]/g, '')
      .replace(/&/g, '&amp;')
      .replace(/</g, '&lt;')
      .replace(/>/g, '&gt;')
      .replace(/"/g, '&quot;')
      .replace(/'/g, '&apos;')
  );
}

/** Applies the gate to a job folder: writes the JUnit file, prints the verdict; returns the exit code it asks for. */
export async function applyGate(
  jobDir: string,
  jobName: string,
  result: JobResult,
  gate: GateOptions
): Promise<number> {
  if (gate.junit) {
    await writeJunit(gate.junit, jobDir, jobName, gate.passThreshold);
    console.log(`junit: ${gate.junit}`);
  }
  const verdict = judge(result, gate);
  if (verdict.lines.length === 0) return 0;
  console.log(['gate:', ...verdict.lines.map((line) => `  ${line}`)].join('\n'));
  return verdict.passed ? 0 : EXIT_GATE_FAILED;
}
