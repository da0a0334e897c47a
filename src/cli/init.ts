/**
 * `rollout init [dir]`: a commented dir/job.yaml for a dataset, an agent and a model, given as flags or, on a
 * terminal, answered at prompts. The file is checked by the job loader before `init` reports it written.
 */
import { existsSync } from 'node:fs';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { createInterface } from 'node:readline/promises';

import type { Command } from 'commander';

import type { Problem } from '../contracts/errors';
import { InputError } from '../contracts/errors';
import { loadJobFile } from '../job/load';
import { ORACLE_AGENT } from '../contracts/job-config';
import { ENVIRONMENT_TYPES } from '../environments/registry';
import { findDataset, readRegistry, registryLabel, registrySource } from '../registry/load';
import { agentProblems, parseDatasetFlag, vendorEnv } from './run-flags';

export interface InitFlags {
  dataset?: string;
  path?: string;
  agent?: string;
  model?: string;
  registry?: string;
  force?: boolean;
}

const DEFAULT_DATASET = 'terminal-bench@2.0';

export function addInitCommand(program: Command): void {
  program
    .command('init [dir]')
    .description(
      'write dir/job.yaml (default: here), commented, for a dataset, an agent and a model (asked on a terminal)'
    )
    .option('-d, --dataset <name@version>', `a registry dataset (default ${DEFAULT_DATASET})`)
    .option('-p, --path <dir>', 'a task folder or a folder of tasks instead')
    .option('-a, --agent <name>', `a built-in agent or ${ORACLE_AGENT} (default ${ORACLE_AGENT})`)
    .option('-m, --model <model>', 'the model')
    .option('--registry <path-or-url>', 'the registry of -d (default: ROLLOUT_REGISTRY_URL, else the shipped one)')
    .option('--force', 'overwrite an existing job.yaml')
    .action(async (dir: string | undefined, opts: InitFlags) => {
      const file = await initJob(dir ?? '.', opts);
      console.log(`wrote ${file}; run it with: rollout run ${path.relative(process.cwd(), file)}`);
    });
}

/** Writes dir/job.yaml; returns its path. */
export async function initJob(dir: string, flags: InitFlags): Promise<string> {
  const file = path.resolve(dir, 'job.yaml');
  if (existsSync(file) && !flags.force)
    throw new InputError([{ file, message: 'already exists (--force overwrites it)' }]);
  const choices = process.stdin.isTTY ? await ask(flags) : flags;
  const agent = choices.agent || ORACLE_AGENT;
  const problems = agentProblems(agent);
  const dataset = choices.path
    ? { path: choices.path }
    : await registryDataset(choices.dataset || DEFAULT_DATASET, flags.registry, problems);
  if (problems.length > 0 || !dataset) throw new InputError(problems);
  await mkdir(path.dirname(file), { recursive: true });
  const text = jobYaml({
    name:
      path
        .basename(path.dirname(file))
        .replace(/[^A-Za-z0-9._-]+/g, '-')
        .replace(/^[^A-Za-z0-9]+/, '') || 'job',
    agent,
    model: choices.model || undefined,
    dataset:
      'path' in dataset ? { path: path.relative(path.dirname(file), path.resolve(dataset.path)) || '.' } : dataset,
  });
  await writeFile(file, text);
  try {
    await loadJobFile(file);
  } catch (err) {
    // A local dataset's tasks may have problems the user fixes later; anything else is this command's mistake.
    if (!(err instanceof InputError) || !('path' in dataset)) {
      await rm(file, { force: true });
      throw err;
    }
  }
  return file;
}

/** The choices flags left open, asked on the terminal (Enter takes the default shown). */
async function ask(flags: InitFlags): Promise<InitFlags> {
  const terminal = createInterface({ input: process.stdin, output: process.stderr });
  // Lines typed ahead of a question wait for it (readline's question() would drop them).
  const lines = terminal[Symbol.asyncIterator]();
  try {
    const answer = async (question: string, fallback: string) => {
      process.stderr.write(`${question} [${fallback}]: `);
      const line = await lines.next();
      return (line.done ? '' : line.value).trim() || fallback;
    };
    let { dataset, path: dir, agent, model } = flags;
    if (!dataset && !dir) {
      const chosen = await answer(
        'dataset (name@version from `rollout datasets list`, or a folder of tasks)',
        DEFAULT_DATASET
      );
      if (existsSync(chosen) || chosen.includes('/')) dir = chosen;
      else dataset = chosen;
    }
    agent ??= await answer("agent (`rollout agents list`; oracle runs the tasks' own solutions)", ORACLE_AGENT);
    if (model === undefined && agent !== ORACLE_AGENT) model = await answer("model (empty: the agent's default)", '');
    return { ...flags, dataset, path: dir, agent, model };
  } finally {
    terminal.close();
  }
}

async function registryDataset(
  value: string,
  registry: string | undefined,
  problems: Problem[]
): Promise<{ name: string; version: string; registry?: string } | undefined> {
  const wanted = parseDatasetFlag(value, problems);
  if (!wanted) return undefined;
  const source = registry ? registrySource(registry) : undefined;
  const found = findDataset(await readRegistry(source), wanted, { file: '--dataset', field: 'dataset' });
  if (!('tasks' in found)) {
    problems.push({ file: '--dataset', message: `${found.message} (${registryLabel(source)})` });
    return undefined;
  }
  return { name: found.name, version: found.version, ...(registry ? { registry } : {}) };
}

const quote = (value: string) => JSON.stringify(value);

function jobYaml(choice: {
  name: string;
  agent: string;
  model?: string;
  dataset: { path: string } | { name: string; version: string; registry?: string };
}): string {
  const env = vendorEnv(choice.agent);
  const agent = [
    `  - name: ${quote(choice.agent)} # \`rollout agents list\`: the built-in agents; oracle runs each task's solution`,
    ...(choice.model ? [`    model: ${quote(choice.model)}`] : []),
    ...(env
      ? [
          '    env:',
          "      # Read from the worker's environment when a trial runs; never written to results or logs.",
          ...Object.entries(env).map(([key, value]) => `      ${key}: ${quote(value)}`),
        ]
      : []),
    "    # kwargs: {} # the agent's own options (docs/agents.md); version: pins another release",
  ];
  const dataset =
    'path' in choice.dataset
      ? [`  - path: ${quote(choice.dataset.path)} # a task folder or a folder of tasks, relative to this file`]
      : [
          '  # A registry dataset (`rollout datasets list`), downloaded and pinned to its commits on the first run.',
          `  - name: ${quote(choice.dataset.name)}`,
          `    version: ${quote(choice.dataset.version)}`,
          ...(choice.dataset.registry
            ? [
                `    registry: { ${/^[a-z]+:\/\//i.test(choice.dataset.registry) ? 'url' : 'path'}: ${quote(choice.dataset.registry)} }`,
              ]
            : []),
        ];
  return [
    '# A Rollout job. Run it with `rollout run job.yaml`; flags override its fields (`rollout run job.yaml -n 8 -t "hello-*"`).',
    '# Every key: docs/spec.md; agents: docs/agents.md; results and statistics: docs/results.md.',
    '',
    '# Names the job and its folder under jobs_dir. Running it again resumes it: finished trials are kept.',
    `name: ${quote(choice.name)}`,
    'jobs_dir: jobs',
    '# Trials per task and agent (pass@k needs several), and trials running at once.',
    'n_attempts: 1',
    'n_concurrent_trials: 4',
    "# Scales every task's timeouts (a slow machine, a slow model).",
    'timeout_multiplier: 1.0',
    'environment:',
    `  type: docker # ${ENVIRONMENT_TYPES.join(' | ')} (README: Kubernetes; docs/environments.md: the cloud sandboxes)`,
    'agents:',
    ...agent,
    'datasets:',
    ...dataset,
    '    # task_names: ["hello-*"] # globs; also exclude_task_names, n_tasks, sample_seed',
    '',
  ].join('\n');
}
