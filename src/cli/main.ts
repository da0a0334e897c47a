import { readFileSync } from 'node:fs';
import path from 'node:path';

import { Command, CommanderError, InvalidArgumentError, Option } from 'commander';

import { defaultHostId } from '../../workers/create-workers';
import { InputError } from '../contracts/errors';
import { ENVIRONMENT_TYPES } from '../environments/registry';
import { readRegistry, registrySource } from '../registry/load';
import { connectClient, resolveTemporal } from '../temporal/connect';
import { installQuietRuntime } from '../temporal/runtime';
import { parseGateOptions } from './gate';
import { renderAgentList } from './agents';
import { listJobs, renderJobList } from './inspect';
import { renderDatasetList } from './report';
import { cancelJob, resumeJob, runJob } from './run';
import type { RunFlags } from './run-flags';
import { COMMAND_LINE, configYaml, namingFlags, resolveRunJob, withRunFlags } from './run-flags';
import { checkTasks, initTask } from './tasks';
import { addInitCommand } from './init';
import { addCtlCommand } from './ctl';
import { parseBudget } from './ctl-budget';
import { addServerCommand } from './dev-server';
import { buildEnvironments } from './build';
import type { ExportOptions } from '../export/export';
import { EXPORT_FORMATS, exportJob } from '../export/export';
import type { ServeFlags } from './serve';
import { serve } from './serve';
import { jobStatus } from './status';
import { dryRun } from './dry-run';
import { addStoreCommands, readableFolder } from './stored-jobs';
import { addViewCommand } from './view';
import { addCodecServerCommand } from './codec-server';
import { stopWithNpm } from './npm-parent';
import { addWorkerCommand } from './worker';

/**
 * Exit codes: 0 job completed (whatever the rewards), 1 job did not complete, 2 invalid input, 3 infrastructure,
 * 4 the CI gate failed (only where the code would otherwise be 0).
 */
const EXIT_INPUT = 2;
const EXIT_INFRASTRUCTURE = 3;

function positiveInt(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n <= 0) throw new InvalidArgumentError('expected a positive whole number');
  return n;
}

interface GateFlags {
  failUnder?: string[];
  maxErrors?: string;
  junit?: string;
  passThreshold?: string;
}

/** The CI gate's options, shared by run, resume and status. */
function withGateOptions(command: Command): Command {
  return command
    .option(
      '--fail-under <threshold>',
      'exit 4 when a metric is below this: [<reward key>[:<mean|sum|min|max|ci95_low|ci95_high|pass@k>]=]<number> ' +
        "(default: the primary reward's mean); repeatable",
      (value: string, previous: string[] = []) => [...previous, value]
    )
    .option('--max-errors <n>', 'exit 4 when more trials than this errored')
    .option('--junit <file>', 'write JUnit XML, one test case per trial')
    .option('--pass-threshold <x>', 'a trial passes in the JUnit file when its primary reward reaches this', '1');
}

/** The in-process worker's options of the commands that run a job (run, resume). */
function withWorkerOptions(command: Command): Command {
  return command
    .option('--no-worker', 'run no worker in this process: only submit and watch')
    .option('--host-id <id>', 'name of this host for its task queues', defaultHostId())
    .option('--max-trials <n>', 'trials this process may hold at once (default: n_concurrent_trials)', positiveInt)
    .option('--skip-preflight', "start without checking each gateway agent's model API (key set, one free call)");
}

/** "<package name> <version>": which package this `rollout` is (npm has an unrelated package named `rollout`). */
function packageVersion(): string {
  // Compiled, this module is dist/src/cli/main.js: three folders below the package root.
  const manifest = JSON.parse(readFileSync(path.join(__dirname, '..', '..', '..', 'package.json'), 'utf8')) as {
    name: string;
    version: string;
  };
  return `${manifest.name} ${manifest.version}`;
}

export function buildProgram(): Command {
  const program = new Command('rollout')
    .description('Evaluate and optimize AI agents in container environments, durably, on Temporal.')
    .version(packageVersion(), '-V, --version', 'print the package name and version')
    .showHelpAfterError()
    // Usage errors are invalid input (exit 2, see main), not commander's exit 1; subcommands inherit this.
    .exitOverride();

  withGateOptions(
    withRunFlags(
      withWorkerOptions(
        program
          .command('run [job]', { isDefault: true })
          .description(
            "run a job file (job.yaml or job.json), or a job given by Harbor's flags (-d/-p, -a, -m, -n, …), which " +
              "override the file's fields; `rollout <job>` does the same"
          )
      )
    )
  ).action(
    async (
      file: string | undefined,
      opts: RunFlags & GateFlags & { worker: boolean; hostId: string; maxTrials?: number; skipPreflight?: boolean }
    ) => {
      const gate = parseGateOptions(opts);
      const job = await resolveRunJob(file, opts);
      if (opts.printConfig) return void process.stdout.write(configYaml(job, process.argv.slice(2)));
      if (opts.dryRun) return dryRun(job);
      // The runtime is installed with the job's log_level once the job is read.
      process.exitCode = await namingFlags(opts, () =>
        runJob(job, file ?? COMMAND_LINE, {
          worker: opts.worker,
          hostId: opts.hostId,
          maxTrials: opts.maxTrials,
          skipPreflight: opts.skipPreflight,
          gate,
        })
      );
    }
  );

  addInitCommand(program);

  addWorkerCommand(program);

  program
    .command('serve')
    .description('HTTP service: remote rollouts (Eval Protocol /init, /status) and step-by-step sessions')
    .option('--config <serve.yaml>', 'the settings below, as a file')
    .option('--dataset <path>', 'a task folder or a folder of tasks')
    .option('--agent <name|job.yaml>', 'a built-in agent, or a job.yaml whose first agent is used (default: oracle)')
    .option('--port <n>', 'port to listen on (default 8080)', positiveInt)
    .option('--host <host>', 'address to listen on (default 127.0.0.1)')
    .option('--jobs-dir <dir>', 'where the serve job folder goes (default jobs)')
    .addOption(new Option('--env <type>', 'environment type (default docker)').choices([...ENVIRONMENT_TYPES]))
    .option('--no-worker', 'run no worker in this process (workers run elsewhere)')
    .option('--host-id <id>', 'name of this host for its task queues', defaultHostId())
    .option('--max-trials <n>', 'trials and sessions this process may hold at once (default 8)', positiveInt)
    .option(
      '--eval-protocol-loopback',
      "accept Eval Protocol's requests (/init, its tracing endpoints) from loopback without the token, as its RemoteRolloutProcessor sends none"
    )
    .action(async (opts: ServeFlags) => {
      installQuietRuntime('info', { shutdownSignals: [] });
      process.exitCode = await serve(opts);
    });

  withGateOptions(
    withWorkerOptions(program.command('resume <job>'))
      .description('run an interrupted job again from its folder (name under --jobs-dir, or the folder itself)')
      .option('--jobs-dir <dir>', 'where job folders are', 'jobs')
      .option(
        '--retry-errored [types...]',
        'also re-run finished trials with these error types (default: InfrastructureError)'
      )
      .option('--budget <limits...>', "raise or lower the job's budget from this run on: cost_usd=X tokens=Y")
  ).action(
    async (
      job: string,
      opts: GateFlags & {
        jobsDir: string;
        retryErrored?: string[] | true;
        budget?: string[];
        worker: boolean;
        hostId: string;
        maxTrials?: number;
        skipPreflight?: boolean;
      }
    ) => {
      const gate = parseGateOptions(opts);
      const rerunErrorTypes =
        opts.retryErrored === true ? ['InfrastructureError'] : opts.retryErrored === undefined ? [] : opts.retryErrored;
      const budget = opts.budget && parseBudget(opts.budget, 'rollout resume');
      process.exitCode = await resumeJob(job, opts.jobsDir, { ...opts, rerunErrorTypes, gate }, budget);
    }
  );

  program
    .command('cancel <job>')
    .description('cancel a job: running trials are cancelled, their containers removed, partial results written')
    .option('--no-worker', "run no worker here (another worker must run the trials' clean-up)")
    .option('--host-id <id>', 'name of this host for its task queues', defaultHostId())
    .action(async (job: string, opts: { worker: boolean; hostId: string }) => {
      installQuietRuntime();
      process.exitCode = await cancelJob(job, opts);
    });

  addCtlCommand(program);

  withGateOptions(
    program
      .command('status <job>')
      .description(
        "a job's progress: counts by state, metrics so far, running trials with their current step; " +
          'a job folder reads its results on disk (no server needed)'
      )
  ).action(async (job: string, opts: GateFlags) => {
    process.exitCode = await jobStatus(job, parseGateOptions(opts));
  });

  addViewCommand(program);
  addCodecServerCommand(program);
  addStoreCommands(program);

  program
    .command('export <job>')
    .description(
      "a job folder's trials, sessions and remote rollouts as JSONL for training (streamed: any size, constant memory)"
    )
    .option('--format <format>', `${Object.keys(EXPORT_FORMATS).join(' | ')}`)
    .option('--min-reward <x>', 'only trials whose primary reward is at least x')
    .option('--agent <name>', 'only the trials of this agent (job.yaml name; sessions: "session")')
    .option('--episodes <which>', 'sharegpt: a row per agent step (all) or per trial (last)', 'all')
    .option('-o, --output <file>', 'write here (whole or not at all) instead of stdout')
    .action(async (job: string, opts: ExportOptions) => {
      const counts = await exportJob(await readableFolder(job, 'all'), opts, process.stdout);
      console.error(
        `exported ${counts.rows} rows from ${counts.trials} trials` +
          (counts.empty ? ` (${counts.empty} had nothing to export in this format)` : '') +
          (opts.output ? ` to ${opts.output}` : '')
      );
    });

  program
    .command('jobs')
    .description('list jobs with their state')
    .action(async () => {
      const endpoint = await resolveTemporal({ startDevServer: false });
      const { connection, client } = await connectClient(endpoint);
      try {
        console.log(renderJobList(await listJobs(client)));
      } finally {
        await connection.close();
      }
    });

  program
    .command('datasets')
    .description('registry datasets')
    .command('list')
    .description('the datasets of a registry: name, version, task count, description')
    .option(
      '--registry <path-or-url>',
      'a registry.json file or URL (default: ROLLOUT_REGISTRY_URL, else the shipped one)'
    )
    .action(async (opts: { registry?: string }) => {
      console.log(renderDatasetList(await readRegistry(opts.registry ? registrySource(opts.registry) : undefined)));
    });

  program
    .command('build <target>')
    .description(
      'build every Docker environment a job (job.yaml) or dataset folder needs, ahead of the job, so it starts ' +
        'without build time; images belong to no job, so delete: true leaves them (docs/tasks.md)'
    )
    .option('--parallel <n>', 'builds at once (default: CPUs, at most 4)', positiveInt)
    .option('--force', 'build again even when the image is there', false)
    .option('--host-id <id>', 'name of this host (recorded on the images)', defaultHostId())
    .action(async (target: string, opts: { parallel?: number; force: boolean; hostId: string }) => {
      process.exitCode = await buildEnvironments(target, opts);
    });

  const tasks = program.command('tasks').description('tools for task authors');
  tasks
    .command('check <paths...>')
    .description(
      'validate, build, run the oracle (must score 1) and a do-nothing agent (must not) on each task or dataset ' +
        'folder; a table of what failed and why; exit 1 when any task fails'
    )
    .option('--jobs-dir <dir>', "where the check's job folder goes (trial logs of failures)", 'jobs')
    .option('--n-concurrent <n>', 'trials at once', positiveInt, 4)
    .option('--host-id <id>', 'name of this host for its task queues', defaultHostId())
    .action(async (paths: string[], opts: { jobsDir: string; nConcurrent: number; hostId: string }) => {
      process.exitCode = await checkTasks(paths, opts);
    });
  tasks
    .command('init <dir>')
    .description('a task skeleton (task.toml, instruction, Dockerfile, solution, tests) that passes `tasks check`')
    .option('--steps', 'a multi-step task ([[steps]], each in steps/<name>/ with its instruction, solution and tests)')
    .action(async (dir: string, opts: { steps?: boolean }) => {
      await initTask(dir, { steps: opts.steps });
    });

  program
    .command('agents')
    .description('the catalogue of built-in agents')
    .command('list')
    .description('name, pinned version, where it installs from, the wire API it speaks, whether it is verified')
    .action(() => console.log(renderAgentList()));

  addServerCommand(program);
  return program;
}

export async function main(argv: string[]): Promise<void> {
  stopWithNpm();
  try {
    await buildProgram().parseAsync(argv);
  } catch (err) {
    if (err instanceof CommanderError) {
      // Commander printed the message (and the help); --help and --version end here too, with 0.
      process.exitCode = err.exitCode === 0 ? 0 : EXIT_INPUT;
    } else if (err instanceof InputError) {
      for (const line of err.message.split('\n')) console.error(`error: ${line}`);
      process.exitCode = EXIT_INPUT;
    } else {
      console.error(`error: ${(err instanceof Error ? err.message : String(err)).split('\n')[0]}`);
      process.exitCode = EXIT_INFRASTRUCTURE;
    }
  }
}
