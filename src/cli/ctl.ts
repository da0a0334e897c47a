/**
 * `rollout ctl <job> <action> [args]`: live control of a running job, sent as a Temporal update to its Job workflow
 * (validated there and kept in its state: workflows/job/control.ts). A new action is one entry in CONTROLS.
 */
import type { Command } from 'commander';

import type { JobControl, JobControlState } from '../../workflows/messages';
import { jobControlUpdate } from '../../workflows/messages';
import { jobControlProblem } from '../../workflows/job/control';
import { InputError } from '../contracts/errors';
import { jobWorkflowId } from '../job/plan';
import { BUDGET_CONTROL, controlBudget, parseBudget } from './ctl-budget';
import { updateRunning } from './ctl-update';

interface ControlAction {
  /** The arguments after the action, as the help shows them. */
  args: string;
  help: string;
  parse(args: string[]): JobControl;
}

const noArgs =
  (control: JobControl) =>
  (args: string[]): JobControl => {
    if (args.length) throw new Error(`takes no arguments (got ${args.join(' ')})`);
    return control;
  };

const CONTROLS: Record<string, ControlAction> = {
  pause: { args: '', help: 'start no more trials; running ones finish', parse: noArgs({ action: 'pause' }) },
  resume: { args: '', help: 'start trials again', parse: noArgs({ action: 'resume' }) },
  concurrency: {
    args: '<n>',
    help: 'run at most n trials at once from now on (n_concurrent_trials)',
    parse: (args) => {
      if (args.length !== 1) throw new Error('takes one number: concurrency <n>');
      return { action: 'concurrency', value: Number(args[0]) };
    },
  },
  'policy-version': {
    args: '<n>',
    help: 'stamp model calls that start from now on with policy version n (docs/rl.md)',
    parse: (args) => {
      if (args.length !== 1) throw new Error('takes one number: policy-version <n>');
      return { action: 'policy-version', value: Number(args[0]) };
    },
  },
};

/** Every action `rollout ctl` takes (the help's list, and the list an unknown action is told). */
function allActions(): Record<string, { args: string; help: string }> {
  return { ...CONTROLS, ...BUDGET_CONTROL };
}

/** The control a command line asks for; bad input is one line naming the argument. */
export function parseControl(action: string, args: string[]): JobControl {
  const entry = Object.hasOwn(CONTROLS, action) ? CONTROLS[action] : undefined;
  if (!entry) {
    throw new InputError([
      {
        file: 'rollout ctl',
        field: action,
        message: `unknown action (one of: ${Object.keys(allActions()).join(', ')})`,
      },
    ]);
  }
  let control: JobControl;
  try {
    control = entry.parse(args);
  } catch (err) {
    throw new InputError([{ file: 'rollout ctl', field: action, message: (err as Error).message }]);
  }
  const problem = jobControlProblem(control);
  if (problem) throw new InputError([{ file: 'rollout ctl', field: action, message: problem }]);
  return control;
}

export function describeControlState(job: string, state: JobControlState): string {
  const version = state.policy_version !== undefined ? ` · policy version ${state.policy_version}` : '';
  return `job ${job}: ${state.paused ? 'paused (running trials finish, none starts)' : 'running'} · concurrency ${state.concurrency}${version}`;
}

/** Sends the control to the job's workflow and waits until it is applied; returns the job's control state after it. */
export function controlJob(job: string, control: JobControl): Promise<JobControlState> {
  return updateRunning(job, jobWorkflowId(job), 'no such job on this Temporal server', (handle) =>
    handle.executeUpdate(jobControlUpdate, { args: [control] })
  );
}

export function addCtlCommand(program: Command): void {
  const actions = Object.entries(allActions()).map(
    ([name, { args, help }]) => `  ${`${name} ${args}`.trim().padEnd(18)} ${help}`
  );
  program
    .command('ctl <job> <action> [args...]')
    .description(
      'control a running job live (a Temporal update: applied within a second, kept across crashes, shown by ' +
        'status, the viewer and the Temporal UI)'
    )
    .addHelpText('after', `\nActions:\n${actions.join('\n')}`)
    .action(async (job: string, action: string, args: string[]) => {
      // The budget is kept by the job's ledger, not its Job workflow (src/budget/workflow/ledger.ts).
      if (action === 'budget') return console.log(await controlBudget(job, parseBudget(args)));
      const control = parseControl(action, args);
      console.log(describeControlState(job, await controlJob(job, control)));
    });
}
