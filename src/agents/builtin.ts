/**
 * What a pre-integrated agent is: where it installs from, which runtime it needs, the wire API it speaks, the
 * options it takes, and how it runs headless. Pure data and string building (no I/O), so the job schema can
 * validate `model`, `version` and `kwargs` against it.
 */
import type { z } from 'zod';

import { AGENTS_ROOT } from '../contracts/paths';
import type { PythonVersion } from './python-runtime';

export const WIRE_APIS = ['anthropic-messages', 'openai-chat-completions', 'openai-responses', 'gemini'] as const;
export type WireApi = (typeof WIRE_APIS)[number];

/** Where an installed agent's package comes from, and the executable it provides. */
export type InstallSource =
  | {
      registry: 'npm';
      package: string;
      bin: string;
      /** Installed beside it (`name@version`), e.g. a platform package its own optional dependencies name wrongly. */
      extraPackages?: string[];
    }
  | {
      registry: 'pypi';
      package: string;
      bin: string;
      extraPackages?: string[];
      /** The oldest Python it runs on (default 3.10): see python-runtime.ts for where a newer one comes from. */
      minPython?: PythonVersion;
    };

/** What the headless run needs to know about one trial. */
export interface RunContext<Kwargs> {
  model: string | undefined;
  kwargs: Kwargs;
  /** Absolute path of the agent's executable inside the container. */
  bin: string;
  /** In-container folder for the agent's native logs (collected into the trial's agent/ folder). */
  logsDir: string;
}

/** A headless run: a bash script (the instruction is in $ROLLOUT_TASK_INSTRUCTION) and the env it adds. */
export interface RunCommand {
  script: string;
  env: Record<string, string>;
}

interface AgentDefinitionBase<Kwargs extends z.ZodObject> {
  name: string;
  description: string;
  /** The version Rollout pins and tests; job.yaml `version` overrides it. */
  version: string;
  wireApi: WireApi;
  /** Installed from its registry in a bookworm container and run against a scripted model server to reward 1. */
  verified: boolean;
  /** Options the agent takes; unknown keys are input errors. */
  kwargs: Kwargs;
}

/** An agent installed into the task's container from a package registry and run there headless. */
export interface InstalledAgentDefinition<
  Kwargs extends z.ZodObject = z.ZodObject,
> extends AgentDefinitionBase<Kwargs> {
  kind: 'installed';
  source: InstallSource;
  /** Arguments of a quick headless run that proves the install works (`--version` unless the agent lacks it). */
  probeArgs?: string;
  /** Debian packages the agent needs at run time, each with a command it provides (apt installs it when missing). */
  systemPackages: Record<string, string>;
  run(context: RunContext<z.infer<Kwargs>>): RunCommand;
}

/** An agent whose loop runs in Rollout's worker and only runs commands in the container: nothing to install. */
export interface WorkerAgentDefinition<Kwargs extends z.ZodObject = z.ZodObject> extends AgentDefinitionBase<Kwargs> {
  kind: 'worker';
}

export type BuiltinAgentDefinition = InstalledAgentDefinition | WorkerAgentDefinition;

/** An installed agent, its run checked against its own kwargs schema. */
export function defineAgent<Kwargs extends z.ZodObject>(
  definition: Omit<InstalledAgentDefinition<Kwargs>, 'kind'>
): InstalledAgentDefinition {
  return { kind: 'installed', ...definition } as unknown as InstalledAgentDefinition;
}

/** Where an installed agent's prefix (npm --prefix or venv) lives in the container. */
export function agentPrefix(name: string, version: string): string {
  return `${AGENTS_ROOT}/agents/${name}-${version}`;
}

/** litellm model strings name their provider; a bare name is taken as an OpenAI-compatible model. */
export function litellmModel(model: string | undefined): string | undefined {
  if (model === undefined) return undefined;
  return model.includes('/') ? model : `openai/${model}`;
}
