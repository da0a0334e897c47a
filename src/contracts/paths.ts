/**
 * Where a trial's things are: in its container (Harbor's layout, which tasks and agents write to) and in its folder on
 * the host. Every reader and writer of a trial folder names its files through trialLayout(), so each is spelled once.
 */
import path from 'node:path';

/** The container's fixed folders. */
export const CONTAINER_PATHS = {
  /** Everything the trial keeps of the container: collect copies the log folders below it to the trial folder. */
  logs: '/logs',
  agentLogs: '/logs/agent',
  verifierLogs: '/logs/verifier',
  /** Files a task or agent leaves here are collected as the trial's artifacts. */
  artifacts: '/logs/artifacts',
  tests: '/tests',
  solution: '/solution',
} as const;

/** In-container folder that holds Rollout's agent installs: one prefix per agent and version, and Node 22. */
export const AGENTS_ROOT = '/opt/rollout';

/**
 * The container's folders as commands run in it name them: the paths above unless an environment maps them
 * elsewhere (local sets the variables).
 */
export const CONTAINER_SHELL_PATHS = {
  logs: '${ROLLOUT_LOGS_DIR:-/logs}',
  tests: '${ROLLOUT_TESTS_DIR:-/tests}',
  oracle: '${ROLLOUT_ORACLE_DIR:-/oracle}',
  agentScripts: '${ROLLOUT_AGENT_DIR:-/installed-agent}',
} as const;

/**
 * The folders of the container's /logs that are collected, each into the trial folder's folder of the same name.
 * Nothing else: what an agent writes beside them (/logs/trial.log, /logs/result.json) would replace Rollout's own.
 */
export const LOG_FOLDERS = ['agent', 'verifier'] as const;

/** The gateway's record of a trial's model calls, one line per call, in the trial's `agent/` folder. */
export const LLM_CALLS_FILE = 'llm-calls.jsonl';
/** Where earlier runs' call records are kept (`earlier-runs/<n>/llm-calls.jsonl`) when a trial runs again. */
export const EARLIER_RUNS_DIR = 'earlier-runs';

/**
 * The trial's record of the sandboxes its attempts created (src/results/sandbox-record.ts): kept when a new run
 * empties the folder, since what an earlier run left is what it is for.
 */
export const SANDBOX_RECORD_FILE = 'sandboxes.jsonl';

/** The verifier's runs of this trial run, one record per sandbox and task step (src/trial/verifier-runs.ts). */
export const VERIFIER_RUNS_FILE = 'verifier-runs.jsonl';

/** Trial-folder files by their path relative to it (the object store commits a trial's files by these names). */
export const TRIAL_FILES = {
  result: 'result.json',
  log: 'trial.log',
  trajectory: 'agent/trajectory.json',
  llmCalls: `agent/${LLM_CALLS_FILE}`,
} as const;

/** Job-folder files by their name in it (src/results/files.ts gives their paths on this host). */
export const JOB_FILES = {
  config: 'config.json',
  result: 'result.json',
  plan: 'plan.jsonl',
} as const;

/** The files of a trial folder (or of one step's folder, `steps/<name>`, which has the same log folders). */
export function trialLayout(trialDir: string) {
  const agent = path.join(trialDir, 'agent');
  return {
    dir: trialDir,
    /** The agent's logs (the container's /logs/agent) and the gateway's records. */
    agent,
    llmCalls: path.join(trialDir, TRIAL_FILES.llmCalls),
    /** The ATIF trajectory, the agent's own or built from the gateway's records. */
    trajectory: path.join(trialDir, TRIAL_FILES.trajectory),
    verifier: path.join(trialDir, 'verifier'),
    artifacts: path.join(trialDir, 'artifacts'),
    earlierRuns: path.join(trialDir, EARLIER_RUNS_DIR),
    sandboxes: path.join(trialDir, SANDBOX_RECORD_FILE),
    verifierRuns: path.join(trialDir, VERIFIER_RUNS_FILE),
    result: path.join(trialDir, TRIAL_FILES.result),
    log: path.join(trialDir, TRIAL_FILES.log),
    step: (name: string) => path.join(trialDir, 'steps', name),
  };
}
export type TrialLayout = ReturnType<typeof trialLayout>;
