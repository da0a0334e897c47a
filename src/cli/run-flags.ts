/**
 * `rollout run`'s Harbor flags (`harbor run -d terminal-bench@2.0 -a claude-code -m anthropic/claude-sonnet-4-5 -n 8`):
 * a job from flags alone, or a job file with flags overriding its fields. Each flag value is checked on its own
 * first, so a bad one is one line naming the flag; the merged job then goes through job.yaml's own schema.
 */
import path from 'node:path';

import type { Command } from 'commander';
import { stringify } from 'yaml';

import { builtinAgent } from '../agents/registry';
import type { Problem } from '../contracts/errors';
import { InputError } from '../contracts/errors';
import { VENDOR_ENV } from '../gateway/upstreams';
import type { Vendor } from '../gateway/dialect';
import type { ResolvedJob } from '../job/load';
import { loadJobConfig, loadJobFile } from '../job/load';
import { ORACLE_AGENT } from '../contracts/job-config';
import { ENVIRONMENT_TYPES } from '../environments/registry';
import { log } from '../log';
import { registrySource } from '../registry/load';
import { literalSecretValues, MASKED, maskedAssignment, maskedEnv } from '../secrets/key-names';

export interface RunFlags {
  dataset?: string[];
  path?: string[];
  agent?: string;
  model?: string[];
  nConcurrent?: string;
  nAttempts?: string;
  taskName?: string[];
  excludeTaskName?: string[];
  nTasks?: string;
  env?: string;
  ae?: string[];
  timeoutMultiplier?: string;
  jobsDir?: string;
  jobName?: string;
  registry?: string;
  printConfig?: boolean;
  dryRun?: boolean;
}

/** Where problems of a job made from flags alone point. */
export const COMMAND_LINE = 'command line';

const repeat = (value: string, previous: string[] = []) => [...previous, value];

/** The flags, on `rollout run`. */
export function withRunFlags(command: Command): Command {
  return command
    .option('-d, --dataset <name@version>', 'a registry dataset (repeatable; the registry: --registry)', repeat)
    .option('-p, --path <dir>', 'a task folder or a folder of tasks (repeatable)', repeat)
    .option(
      '-a, --agent <name>',
      `a built-in agent or ${ORACLE_AGENT} (\`rollout agents list\`; default ${ORACLE_AGENT})`
    )
    .option('-m, --model <model>', 'the model; repeated, one agent per model', repeat)
    .option('-n, --n-concurrent <n>', 'trials at once (n_concurrent_trials)')
    .option('-k, --n-attempts <n>', 'attempts per task and agent (n_attempts)')
    .option('-t, --task-name <glob>', 'only tasks whose name matches (repeatable)', repeat)
    .option('-x, --exclude-task-name <glob>', 'no tasks whose name matches (repeatable)', repeat)
    .option('-l, --n-tasks <n>', 'at most this many tasks of each dataset (n_tasks)')
    .option('-e, --env <type>', `environment type: ${ENVIRONMENT_TYPES.join(', ')}`)
    .option('--ae <KEY=VALUE>', "the agent's env (repeatable; ${VAR} is read on the worker)", repeat)
    .option('--timeout-multiplier <x>', 'scales every timeout')
    .option('--jobs-dir <dir>', 'where job folders go (default jobs)')
    .option('--job-name <name>', 'the job (and its folder) name; default: the job file name, else the time')
    .option('--registry <path-or-url>', 'the registry of -d (default: ROLLOUT_REGISTRY_URL, else the shipped one)')
    .option('--print-config', 'print the effective job as YAML (a job file) and run nothing')
    .option('--dry-run', 'print the plan and an estimate of its cost (earlier jobs, price table); start nothing');
}

const JOB_FLAGS = [
  'dataset',
  'path',
  'agent',
  'model',
  'nConcurrent',
  'nAttempts',
  'taskName',
  'excludeTaskName',
  'nTasks',
  'env',
  'ae',
  'timeoutMultiplier',
  'jobsDir',
  'jobName',
  'registry',
] as const satisfies readonly (keyof RunFlags)[];

/** Whether any flag sets a job field (else `rollout run` needs a job file). */
function setsJob(flags: RunFlags): boolean {
  return JOB_FLAGS.some((flag) => flags[flag] !== undefined);
}

/** The job to run: the file's with the flags over it, or the flags' alone. Every bad flag value at once. */
export async function resolveRunJob(file: string | undefined, flags: RunFlags): Promise<ResolvedJob> {
  const problems: Problem[] = [];
  const override = jobOverride(flags, problems);
  if (!file && !setsJob(flags))
    problems.push({
      file: 'rollout run',
      message: 'give a job file, or a dataset (-d name@version, -p folder) and an agent (-a)',
    });
  else if (!file && !flags.dataset && !flags.path)
    problems.push({ file: '--dataset', message: 'a job without a job file needs -d name@version or -p folder' });
  if (problems.length > 0) throw new InputError(problems);
  return namingFlags(flags, async () => {
    if (file) return loadJobFile(file, override);
    const name = flags.jobName ?? timestampName(new Date());
    return loadJobConfig(override({ name }), COMMAND_LINE, process.cwd());
  });
}

/** Runs `work`; its input problems in fields a flag set name that flag (a job file's own fields keep their file). */
export async function namingFlags<T>(flags: RunFlags, work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (err) {
    throw err instanceof InputError ? new InputError(err.problems.map((p) => flagProblem(p, flags))) : err;
  }
}

/** A one-liner's job name, as Harbor names its jobs: the start time, to the second (local time). */
export function timestampName(date: Date): string {
  const two = (n: number) => String(n).padStart(2, '0');
  return (
    `${date.getFullYear()}-${two(date.getMonth() + 1)}-${two(date.getDate())}__` +
    `${two(date.getHours())}-${two(date.getMinutes())}-${two(date.getSeconds())}`
  );
}

type Raw = Record<string, unknown>;

/** The flags as a change to a job file's raw mapping (before its schema): fields set, agents and datasets replaced. */
function jobOverride(flags: RunFlags, problems: Problem[]): (raw: Raw) => Raw {
  const n = {
    n_concurrent_trials: positiveInt('--n-concurrent', flags.nConcurrent, problems),
    n_attempts: positiveInt('--n-attempts', flags.nAttempts, problems),
    n_tasks: positiveInt('--n-tasks', flags.nTasks, problems),
  };
  const timeoutMultiplier = positiveNumber('--timeout-multiplier', flags.timeoutMultiplier, problems);
  if (flags.env !== undefined && !ENVIRONMENT_TYPES.includes(flags.env))
    problems.push({
      file: '--env',
      message: `unknown environment type "${flags.env}": expected one of ${ENVIRONMENT_TYPES.join(', ')}`,
    });
  const agentEnv = keyValues(flags.ae ?? [], problems);
  const datasets = flagDatasets(flags, problems);
  problems.push(...agentProblems(flags.agent));
  if (flags.agent === undefined && (flags.model?.length ?? 0) > 1)
    problems.push({ file: '--model', message: 'several models need -a: one agent per model' });
  for (const flag of ['model', 'taskName', 'excludeTaskName', 'path', 'jobsDir', 'jobName'] as const) {
    const values = flags[flag];
    if ((Array.isArray(values) ? values : [values]).some((value) => value === ''))
      problems.push({ file: `--${kebab(flag)}`, message: 'must not be empty' });
  }
  const selection = {
    ...(flags.taskName ? { task_names: flags.taskName } : {}),
    ...(flags.excludeTaskName ? { exclude_task_names: flags.excludeTaskName } : {}),
    ...(n.n_tasks !== undefined ? { n_tasks: n.n_tasks } : {}),
  };
  return (raw) => {
    const job: Raw = { ...raw };
    if (n.n_concurrent_trials !== undefined) job.n_concurrent_trials = n.n_concurrent_trials;
    if (n.n_attempts !== undefined) job.n_attempts = n.n_attempts;
    if (timeoutMultiplier !== undefined) job.timeout_multiplier = timeoutMultiplier;
    if (flags.jobsDir !== undefined) job.jobs_dir = flags.jobsDir;
    if (flags.jobName !== undefined) job.name = flags.jobName;
    if (flags.env !== undefined) job.environment = { ...asRaw(job.environment), type: flags.env };
    if (datasets) job.datasets = datasets;
    if (Object.keys(selection).length > 0 && Array.isArray(job.datasets))
      job.datasets = job.datasets.map((dataset) => ({ ...asRaw(dataset), ...selection }));
    // A job file's agents stay unless -a replaces them; a job from flags alone runs -a (default: the oracle).
    job.agents =
      flags.agent !== undefined || !Array.isArray(raw.agents)
        ? flagAgents(flags.agent ?? ORACLE_AGENT, flags.model)
        : (job.agents as unknown[]).map((agent) => withModel(asRaw(agent), flags.model));
    if (Object.keys(agentEnv).length > 0)
      job.agents = (job.agents as unknown[]).map((agent) => {
        const raw = asRaw(agent);
        return { ...raw, env: { ...asRaw(raw.env), ...agentEnv } };
      });
    return job;
  };
}

/**
 * A built-in agent's key and base URL, read from the worker's environment when its trials run (as Harbor passes the
 * host's): `${ANTHROPIC_API_KEY}`, `${ANTHROPIC_BASE_URL:-https://api.anthropic.com}`. None for the oracle.
 */
export function vendorEnv(agent: string): Record<string, string> | undefined {
  const vendor = builtinAgent(agent)?.wireApi.split('-')[0] as Vendor | undefined;
  if (!vendor) return undefined;
  const { keys, baseUrls, defaultBaseUrl } = VENDOR_ENV[vendor];
  return { [keys[0]!]: `\${${keys[0]!}}`, [baseUrls[0]!]: `\${${baseUrls[0]!}:-${defaultBaseUrl}}` };
}

/** -a with its -m (one agent per model), with its vendor's key and base URL. */
function flagAgents(name: string, models: string[] | undefined): Raw[] {
  const env = vendorEnv(name);
  const agent = { name, ...(env ? { env } : {}) };
  if (!models || models.length === 0) return [agent];
  if (models.length === 1) return [{ ...agent, model: models[0] }];
  return models.map((model) => ({
    ...agent,
    name: `${name}-${model.replace(/[^A-Za-z0-9._-]+/g, '-')}`,
    agent: name,
    model,
  }));
}

/** -m without -a: the job file's agents with this model (one model only: which agent would get which?). */
function withModel(agent: Raw, models: string[] | undefined): Raw {
  return models?.[0] !== undefined && agent.name !== ORACLE_AGENT ? { ...agent, model: models[0] } : agent;
}

function flagDatasets(flags: RunFlags, problems: Problem[]): Raw[] | undefined {
  if (!flags.dataset && !flags.path) return undefined;
  const registry = flags.registry ? { registry: registrySource(flags.registry) } : {};
  const fromRegistry = (flags.dataset ?? []).flatMap((value) => {
    const dataset = parseDatasetFlag(value, problems);
    return dataset ? [{ ...registry, ...dataset }] : [];
  });
  return [...fromRegistry, ...(flags.path ?? []).map((dir) => ({ path: path.resolve(dir) }))];
}

/** -a's value: the oracle or a built-in agent. */
export function agentProblems(agent: string | undefined): Problem[] {
  if (agent === undefined || agent === ORACLE_AGENT || builtinAgent(agent)) return [];
  return [
    {
      file: '--agent',
      message: `unknown agent "${agent}": \`rollout agents list\` lists the built-in agents (and ${ORACLE_AGENT})`,
    },
  ];
}

/** -d's value: `name@version`, or a name the registry has one version of. */
export function parseDatasetFlag(value: string, problems: Problem[]): { name: string; version?: string } | undefined {
  const match = /^([^@\s]+)(?:@([^@\s]+))?$/.exec(value);
  if (!match) {
    problems.push({ file: '--dataset', message: `"${value}" is not name@version (or a name with one version)` });
    return undefined;
  }
  return { name: match[1]!, ...(match[2] ? { version: match[2] } : {}) };
}

function positiveInt(flag: string, value: string | undefined, problems: Problem[]): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (/^\d+$/.test(value.trim()) && Number.isSafeInteger(n) && n > 0) return n;
  problems.push({ file: flag, message: `expected a positive whole number, got "${value}"` });
  return undefined;
}

function positiveNumber(flag: string, value: string | undefined, problems: Problem[]): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (value.trim() !== '' && Number.isFinite(n) && n > 0) return n;
  problems.push({ file: flag, message: `expected a positive number, got "${value}"` });
  return undefined;
}

function keyValues(pairs: string[], problems: Problem[]): Record<string, string> {
  const env: Record<string, string> = {};
  for (const pair of pairs) {
    const match = /^([A-Za-z_][A-Za-z0-9_]*)=(.*)$/s.exec(pair);
    if (match) env[match[1]!] = match[2]!;
    else
      problems.push({
        file: '--ae',
        message: `"${maskedAssignment(pair)}" is not KEY=VALUE (KEY: letters, digits and _)`,
      });
  }
  for (const name of Object.keys(env).filter((name) => literalSecretValues({ [name]: env[name]! }).length > 0)) {
    log.warn(
      `--ae ${name}: a literal secret value is kept in the job's config.json (redacted from results and --print-config); give it as \${${name}} to have each worker read it from its environment`
    );
  }
  return env;
}

function flagProblem(problem: Problem, flags: RunFlags): Problem {
  const field = problem.field ?? '';
  const flag =
    (field === 'name' && flags.jobName !== undefined && '--job-name') ||
    (field === 'jobs_dir' && flags.jobsDir !== undefined && '--jobs-dir') ||
    (field === 'environment.type' && flags.env !== undefined && '--env') ||
    (/^agents\.\d+\.model$/.test(field) && flags.model !== undefined && '--model') ||
    (field.startsWith('agents.') && flags.agent !== undefined && '--agent') ||
    (/^datasets\.\d+\.(name|version)$/.test(field) && flags.dataset !== undefined && '--dataset') ||
    undefined;
  return flag ? { file: flag, message: problem.message } : problem;
}

function asRaw(value: unknown): Raw {
  return value !== null && typeof value === 'object' && !Array.isArray(value) ? (value as Raw) : {};
}

function kebab(name: string): string {
  return name.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
}

/**
 * The job as a job file: what config.json holds (defaults applied, paths absolute, registry datasets not pinned
 * yet), in YAML. Saved and run, it runs the same job.
 */
export function configYaml(job: ResolvedJob, argv: string[]): string {
  const { file: _file, ...config } = job;
  // Literal secret values (`--ae OPENAI_API_KEY=sk-…`) are masked, in the command line repeated above it too.
  const agents = config.agents.map((agent) => ({ ...agent, env: maskedEnv(agent.env) }));
  const masked = agents.some((agent, i) => JSON.stringify(agent.env) !== JSON.stringify(config.agents[i]!.env));
  const how = `rollout ${argv.map(maskedAssignment).join(' ')}`;
  const note = masked
    ? `# Literal secret values are shown as ${MASKED}: give them as \${VAR}, read on the worker.\n`
    : '';
  return `# ${how}\n# The effective job: save it (e.g. as job.yaml) and run it with \`rollout run job.yaml\`.\n${note}${stringify({ ...config, agents })}`;
}
