import { z } from 'zod';

import { parseBytes, parseCpus } from './quantity';
import type { RegistryTaskSource } from './registry';

/**
 * task.toml: the spec's format (version = "1.0", memory = "2G") and Harbor's newer one (schema_version = "1.4",
 * [task] name, cpus = 1, memory_mb, storage_mb, gpus, [verifier.env], [solution.env]) are both accepted unchanged.
 * Every key either acts or, when a task sets it, is named in the trial's `unenforced_limits` (TASK_KEYS says which);
 * any other key is an error.
 */

const quantity = (parse: (v: string | number) => number) =>
  z.union([z.string(), z.number()]).refine(
    (value) => {
      try {
        parse(value);
        return true;
      } catch {
        return false;
      }
    },
    { message: 'not a quantity (examples: 1, 500m, 2G, 256Mi, 1.5Gi)' }
  );

const envTable = z.record(z.string(), z.string());
/** Accepted as Harbor defines it; Rollout does not act on it (the trial lists it in unenforced_limits). */
const ignored = z.unknown().optional();
const timeoutSec = z.number().positive();
/** A user name or uid, as Harbor takes it: `docker exec --user` gets it as text. */
const user = z
  .union([z.string().min(1), z.number().int().nonnegative()])
  .transform(String)
  .optional();

export const NETWORK_MODES = ['public', 'no-network', 'allowlist'] as const;
export type NetworkMode = (typeof NETWORK_MODES)[number];
const networkKeys = { network_mode: z.enum(NETWORK_MODES).optional(), allowed_hosts: z.array(z.string()).optional() };

/** Docker HEALTHCHECK's options, with Harbor's defaults: it must pass before the agent is installed. */
const Healthcheck = z.strictObject({
  command: z.string().min(1),
  interval_sec: z.number().nonnegative().default(5),
  timeout_sec: z.number().positive().default(30),
  start_period_sec: z.number().nonnegative().default(0),
  start_interval_sec: z.number().nonnegative().default(5),
  retries: z.number().int().positive().default(3),
});
export type HealthcheckConfig = z.infer<typeof Healthcheck>;

const EnvironmentSection = z.strictObject({
  build_timeout_sec: timeoutSec.default(600),
  docker_image: z.string().min(1).nullable().default(null),
  cpus: quantity(parseCpus).default('1'),
  memory: quantity(parseBytes).optional(),
  storage: quantity(parseBytes).optional(),
  memory_mb: z.number().int().positive().optional(),
  storage_mb: z.number().int().positive().optional(),
  gpus: z.number().int().nonnegative().optional(),
  pids_limit: z.number().int().positive().optional(),
  env: envTable.default({}),
  workdir: z.string().optional(),
  os: z
    .string()
    .transform((os) => os.toLowerCase())
    .pipe(z.enum(['linux', 'windows']))
    .default('linux'),
  gpu_types: ignored,
  tpu: ignored,
  mcp_servers: ignored,
  skills_dir: ignored,
  healthcheck: Healthcheck.optional(),
  /** Harbor's older key: false is network_mode = "no-network" (when network_mode is not set). */
  allow_internet: z.boolean().optional(),
  ...networkKeys,
});

/** A compose service's name (Harbor: main is the trial's container). */
const serviceName = z.string().regex(/^[a-zA-Z0-9][a-zA-Z0-9_.-]*$/, 'not a compose service name');

/**
 * Harbor's artifacts: paths copied out of the environment after the agent ran (into the trial's artifacts/, mirroring
 * the source path or at `destination`), and into a separate verifier's environment at their source path.
 */
const Artifact = z
  .union([
    z.string().min(1),
    z.strictObject({
      source: z.string().min(1),
      destination: z.string().nullable().optional(),
      exclude: z.array(z.string()).default([]),
      service: serviceName.nullable().optional(),
    }),
  ])
  .transform((entry) => (typeof entry === 'string' ? { source: entry, exclude: [] } : entry))
  .refine((entry) => !entry.source.split('/').includes('..'), { message: 'source must not contain ".."' })
  .refine((entry) => !entry.service || entry.service === 'main' || entry.source.startsWith('/'), {
    message: "a sidecar's artifact source must be an absolute path",
  });

/** [[verifier.collect]]: a command run in a service after the agent, so its state can be collected as artifacts. */
const CollectHook = z.strictObject({
  command: z.string().min(1),
  service: serviceName.default('main'),
  timeout_sec: timeoutSec.default(60),
  user: z.union([z.string(), z.number().int()]).nullable().optional(),
});

/** [verifier]'s keys but its timeout, which a step's [steps.verifier] has too. */
const verifierKeys = {
  env: envTable.default({}),
  user,
  /** Harbor: absent means separate when [verifier.environment] is set, else shared. */
  environment_mode: z.enum(['shared', 'separate']).nullable().optional(),
  environment: EnvironmentSection.nullable().optional(),
  collect: z.array(CollectHook).default([]),
  ...networkKeys,
};

const VerifierSection = z
  .strictObject({ timeout_sec: timeoutSec.default(600), ...verifierKeys })
  .refine((verifier) => !(verifier.environment_mode === 'shared' && verifier.environment), {
    message: "environment_mode = 'shared' is incompatible with [verifier.environment]",
    path: ['environment_mode'],
  });

/**
 * One of Harbor's `[[steps]]`: its folder is steps/<name>/ (instruction.md, and optionally solution/, tests/ and
 * workdir/). Keys it leaves unset fall back to the task's [agent] and [verifier]; none has a default of its own.
 */
const StepSection = z.strictObject({
  name: z
    .string()
    .regex(
      /^[A-Za-z0-9][A-Za-z0-9_.-]*$/,
      'a step name is the name of its folder under steps/ (letters, digits, _ . -)'
    ),
  agent: z.strictObject({ timeout_sec: timeoutSec.optional(), user, ...networkKeys }).prefault({}),
  verifier: z.strictObject({ timeout_sec: timeoutSec.optional(), ...verifierKeys }).prefault({}),
  /** A number gates on the `reward` key; a table on each key it names (a missing key counts as -inf). */
  min_reward: z
    .union([z.number(), z.record(z.string(), z.number())])
    .nullable()
    .optional(),
  healthcheck: Healthcheck.optional(),
  artifacts: z.array(Artifact).default([]),
});
export type StepConfig = z.infer<typeof StepSection>;

export const TaskConfigSchema = z.strictObject({
  version: z.string().optional(),
  /** Neither version nor schema_version: Harbor's current schema, as Harbor reads it. */
  schema_version: z.string().optional(),
  source: z.string().nullable().default(null),
  metadata: z.record(z.string(), z.unknown()).default({}),
  task: z.looseObject({ name: z.string().optional() }).optional(),
  verifier: VerifierSection.prefault({}),
  agent: z.strictObject({ timeout_sec: timeoutSec.default(600), user, ...networkKeys }).prefault({}),
  environment: EnvironmentSection.prefault({}),
  solution: z.strictObject({ env: envTable.default({}) }).prefault({}),
  steps: z
    .array(StepSection)
    .min(1, 'a multi-step task needs at least one [[steps]] entry')
    .refine((steps) => new Set(steps.map((step) => step.name)).size === steps.length, {
      message: 'step names must be unique',
    })
    .optional(),
  /** How a multi-step trial's reward is derived from its steps' (Harbor's default: mean). */
  multi_step_reward_strategy: z.enum(['mean', 'final']).nullable().optional(),
  artifacts: z.array(Artifact).default([]),
});

export type TaskConfig = z.infer<typeof TaskConfigSchema>;
export type ArtifactEntry = TaskConfig['artifacts'][number];

/** The environment a separate verifier runs in (Harbor's resolution), or null when it shares the agent's. */
export function separateVerifierEnvironment(config: TaskConfig): TaskConfig['environment'] | null {
  const { environment_mode: mode, environment } = config.verifier;
  if (mode === 'shared' || (!mode && !environment)) return null;
  return environment ?? config.environment;
}

/** Resources a task asks for, in the units the environments enforce. */
export interface TaskResources {
  cpus: number;
  memoryBytes: number;
  storageBytes: number;
  gpus: number;
  pidsLimit: number;
}

const MIB = 2 ** 20;
const DEFAULT_MEMORY = '2G';
const DEFAULT_STORAGE = '10G';
/** Room for agents that run browsers or compilers (each thread counts), far below what exhausts a host. */
export const DEFAULT_PIDS_LIMIT = 4096;

export function taskResources(environment: TaskConfig['environment']): TaskResources {
  const memoryBytes =
    environment.memory_mb !== undefined ? environment.memory_mb * MIB : taskBytes(environment.memory ?? DEFAULT_MEMORY);
  const storageBytes =
    environment.storage_mb !== undefined
      ? environment.storage_mb * MIB
      : taskBytes(environment.storage ?? DEFAULT_STORAGE);
  return {
    cpus: parseCpus(environment.cpus),
    memoryBytes,
    storageBytes,
    gpus: environment.gpus ?? 0,
    pidsLimit: environment.pids_limit ?? DEFAULT_PIDS_LIMIT,
  };
}

/**
 * task.toml sizes as Harbor reads them: `memory_mb`/`storage_mb` are MiB and "2G", "512M", "64K" are binary units
 * (2G = 2048 MiB). Other quantities ("256Mi", "1e9", a bare number of MB) follow the job's quantity syntax.
 */
function taskBytes(value: string | number): number {
  const harbor = typeof value === 'string' ? /^\s*(\d+(?:\.\d+)?)\s*([GMK])\s*$/i.exec(value) : null;
  if (!harbor) return parseBytes(value);
  const unit = { G: 2 ** 30, M: 2 ** 20, K: 2 ** 10 }[(harbor[2] as string).toUpperCase() as 'G' | 'M' | 'K'];
  return Number(harbor[1]) * unit;
}

/**
 * A task folder, read and validated: instruction, config and what it provides. For a multi-step task (`[[steps]]`),
 * the instruction, solution and tests are those of its first step until `taskAtStep` (src/task/steps.ts) gives the
 * view of another one.
 */
export interface Task {
  name: string;
  dir: string;
  config: TaskConfig;
  instruction: string;
  resources: TaskResources;
  hasSolution: boolean;
  /** The folder the oracle runs solve.sh from. */
  solutionDir: string;
  /** Folders copied to /tests in this order (a step's own tests/ over the task's shared one). */
  testsDirs: string[];
  /** The `[[steps]]` in order; empty for a single-step task. */
  steps: TaskStep[];
  /** A registry task: where it comes from, so a worker on another host can fetch it into its own cache. */
  source?: RegistryTaskSource;
}

/** One step of a multi-step task, read from steps/<name>/. */
export interface TaskStep {
  name: string;
  dir: string;
  instruction: string;
  hasSolution: boolean;
  /** The task's shared tests/ (when it exists), then the step's own (when it exists): copied to /tests in order. */
  testsDirs: string[];
}

/** Whether a phase may reach the network: Harbor's `public` and `no-network` (an allowlist is refused at start). */
export type PhaseNetwork = 'public' | 'none';
