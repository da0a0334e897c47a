import { readFileSync } from 'node:fs';
import path from 'node:path';

import { Command, CommanderError } from 'commander';

import { InputError } from '../contracts/errors';
import { addInitCommand } from './init';
import { addCtlCommand } from './ctl';
import { addServerCommand } from './dev-server';
import { addStoreCommands } from './stored-jobs';
import { addViewCommand } from './view';
import { addCodecServerCommand } from './codec-server';
import { stopWithNpm } from './npm-parent';
import { addWorkerCommand } from './worker';
import {
  addAgentsCommand,
  addBuildCommand,
  addCancelCommand,
  addDatasetsCommand,
  addExportCommand,
  addJobsCommand,
  addResumeCommand,
  addRunCommand,
  addServeCommand,
  addStatusCommand,
  addTasksCommands,
} from './commands';

/**
 * Exit codes: 0 job completed (whatever the rewards), 1 job did not complete, 2 invalid input, 3 infrastructure,
 * 4 the CI gate failed (only where the code would otherwise be 0).
 */
const EXIT_INPUT = 2;
const EXIT_INFRASTRUCTURE = 3;

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

  addRunCommand(program);
  addInitCommand(program);
  addWorkerCommand(program);
  addServeCommand(program);
  addResumeCommand(program);
  addCancelCommand(program);
  addCtlCommand(program);
  addStatusCommand(program);
  addViewCommand(program);
  addCodecServerCommand(program);
  addStoreCommands(program);
  addExportCommand(program);
  addJobsCommand(program);
  addDatasetsCommand(program);
  addBuildCommand(program);
  addTasksCommands(program);
  addAgentsCommand(program);
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
