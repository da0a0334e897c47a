import { z } from 'zod';

import { parseBytes, parseCpus, quantitySchema as quantity } from './quantity';
import type { TaskErrorType } from './trial-errors';
import { API_ERROR_TYPES, JOB_BUDGET_ERROR, TASK_ERROR_TYPES } from './trial-errors';

/** The model vendors whose wire dialects the gateway speaks: an upstream's kind, a `rate_limits` rule's match. */
export const VENDORS = ['openai', 'anthropic', 'gemini'] as const;
export type Vendor = (typeof VENDORS)[number];

/**
 * Error types `retry` may name: the task-level ones (infrastructure errors are retried anyway), but the job's spent
 * budget (a retry would be refused again; `rollout resume` runs those trials).
 */
const RETRYABLE_ERROR_TYPES = TASK_ERROR_TYPES.filter((type) => type !== JOB_BUDGET_ERROR) as [
  TaskErrorType,
  ...TaskErrorType[],
];

/** job.yaml / job.json, as the spec defines it. Unknown keys are errors so typos never pass silently. */

/** job.yaml's `environment.type`: a provider of src/environments/registry.ts, or one loaded with `import`. */
export type EnvironmentType = string;

export const METRIC_TYPES = ['sum', 'min', 'max', 'mean'] as const;
export type MetricType = (typeof METRIC_TYPES)[number];

/** The built-in agent that runs the task's own solution. */
export const ORACLE_AGENT = 'oracle';

export const LOG_LEVELS = ['debug', 'info', 'warn', 'warning', 'error'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

/** setTimeout's longest delay (2^31 - 1 ms), in whole seconds: a timer asked for longer fires at once. */
export const MAX_TIMER_SEC = Math.floor((2 ** 31 - 1) / 1000);

/**
 * job.yaml `environment:` keys: the caps (see resourceCaps in src/task/caps.ts for their defaults). max_memory defaults
 * to the host's memory less 10 % for docker and local; pids, steps and timeouts are always capped.
 */
export const CAP_KEYS = {
  max_memory: quantity(parseBytes).optional(),
  max_cpus: quantity(parseCpus).optional(),
  max_storage: quantity(parseBytes).optional(),
  max_pids: z.number().int().positive().optional(),
  max_steps: z.number().int().positive().optional(),
  /** Each timeout a task declares (build, agent, verifier, healthcheck, collect hooks); at most a timer's 24.8 days. */
  max_timeout_sec: z.number().positive().max(MAX_TIMER_SEC).optional(),
};

/** The job.yaml `environment:` keys the caps come from (all optional: see resourceCaps for the defaults). */
export type CapSettings = { type: string } & z.infer<z.ZodObject<typeof CAP_KEYS>>;

/** job.yaml `rate_limits`: one rule per upstream/model glob; calls over a limit wait at the gateway. */
export const RateLimitSchema = z
  .strictObject({
    match: z
      .strictObject({
        upstream: z.enum(VENDORS).optional(),
        model: z.string().min(1).optional(),
      })
      .prefault({}),
    requests_per_minute: z.number().positive().optional(),
    input_tokens_per_minute: z.number().positive().optional(),
    max_concurrent: z.number().int().positive().optional(),
  })
  .refine(
    (rule) =>
      rule.requests_per_minute !== undefined ||
      rule.input_tokens_per_minute !== undefined ||
      rule.max_concurrent !== undefined,
    'a rule sets requests_per_minute, input_tokens_per_minute or max_concurrent'
  );

const positiveCap = z.number().positive().finite();
/** job.yaml `budget`: caps on the whole job's model spend, on every worker (docs/budgets.md). */
const BudgetSchema = z
  .strictObject({ cost_usd: positiveCap.optional(), tokens: positiveCap.int().optional() })
  .refine((b) => b.cost_usd !== undefined || b.tokens !== undefined, 'a budget sets cost_usd or tokens');
/** An agent's `limits`: caps on each of its trials' model spend; a call over one is refused. */
const LimitsSchema = z
  .strictObject({
    cost_usd: positiveCap.optional(),
    tokens: positiveCap.int().optional(),
    llm_calls: positiveCap.int().optional(),
  })
  .refine(
    (l) => l.cost_usd !== undefined || l.tokens !== undefined || l.llm_calls !== undefined,
    'limits set cost_usd, tokens or llm_calls'
  );

/** An agent's `sampling`: the usual names of OpenAI-style servers (vLLM and SGLang take them all). */
const SamplingSchema = z
  .strictObject({
    temperature: z.number().nonnegative().optional(),
    top_p: z.number().gt(0).max(1).optional(),
    top_k: z.number().int().optional(),
    min_p: z.number().min(0).max(1).optional(),
    max_tokens: z.number().int().positive().optional(),
    seed: z.number().int().optional(),
    presence_penalty: z.number().optional(),
    frequency_penalty: z.number().optional(),
    repetition_penalty: z.number().positive().optional(),
  })
  .refine((s) => Object.keys(s).length > 0, 'sampling sets at least one parameter');

/** "0" means "not set" for the spec's override and ceiling keys. */
const optionalSeconds = z.number().nonnegative().default(0);

export const AgentSchema = z.strictObject({
  name: z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]*$/, 'letters, digits, ".", "_" and "-" only'),
  description: z.string().optional(),
  /** A built-in agent under another name (e.g. two configurations of one agent); default: `name` if built in. */
  agent: z.string().optional(),
  model: z.string().min(1).optional(),
  /** Built-in agents: the version to install instead of the one Rollout pins. */
  version: z
    .string()
    .regex(/^[A-Za-z0-9][A-Za-z0-9._+-]*$/, 'a package version, e.g. "2.1.330"')
    .optional(),
  /** Built-in agents: their own options, validated against the agent's schema. */
  kwargs: z.record(z.string(), z.unknown()).optional(),
  install: z.string().optional(),
  execute: z.string().optional(),
  env: z.record(z.string(), z.union([z.string(), z.number(), z.boolean()]).transform(String)).default({}),
  /** Ceiling for the install script (the spec has none; Harbor's fixed 360 s cap is a known pain point). */
  install_timeout_sec: z.number().positive().default(900),
  /**
   * Route the agent's model calls through the worker's model gateway (recorded, real keys kept out of the
   * container): OPENAI_BASE_URL, ANTHROPIC_BASE_URL and GOOGLE_GEMINI_BASE_URL point at it. Default: on for
   * built-in agents, off for custom ones.
   */
  gateway: z.boolean().optional(),
  /** Caps on each trial's model calls through the gateway (docs/budgets.md). */
  limits: LimitsSchema.optional(),
  /**
   * Ask the upstream (an inference server: vLLM, SGLang) for token ids and logprobs on every call and record them,
   * for `rollout export --format rl` (docs/rl.md). Preflight checks the upstream returns them.
   */
  tokens: z.boolean().optional(),
  /** Sampling parameters set on every model call, whatever the agent sends (on-policy sampling; recorded). */
  sampling: SamplingSchema.optional(),
  /** OpenAI-style base URLs of inference servers of the same model: each trial's calls all go to one of them. */
  replicas: z
    .array(z.url({ protocol: /^https?$/ }))
    .min(1)
    .optional(),
});
export type AgentConfig = z.infer<typeof AgentSchema>;

const RegistrySource = z.union([
  z.strictObject({ path: z.string().min(1) }),
  z.strictObject({ url: z.string().url() }),
]);

/** Harbor's per-dataset selection keys (globs on task names, a count, a seed for a deterministic sample). */
const selectionKeys = {
  task_names: z.array(z.string().min(1)).min(1).optional(),
  exclude_task_names: z.array(z.string().min(1)).optional(),
  n_tasks: z.number().int().positive().optional(),
  sample_seed: z.number().int().optional(),
};

/** A registry task at a full commit. Rollout writes these into config.json so a resume runs the same files. */
const PinnedTaskSchema = z.strictObject({
  name: z.string().min(1),
  git_url: z.string().min(1),
  git_commit_id: z.string().regex(/^[0-9a-f]{40}$/, 'a full commit SHA'),
  path: z.string(),
});

export const PathDatasetSchema = z.strictObject({ path: z.string().min(1), ...selectionKeys });
export const RegistryDatasetConfigSchema = z.strictObject({
  /** Absent: the registry shipped with Rollout, or ROLLOUT_REGISTRY_URL. */
  registry: RegistrySource.optional(),
  name: z.string().min(1),
  version: z.string().min(1).optional(),
  ...selectionKeys,
  pinned_tasks: z.array(PinnedTaskSchema).optional(),
});
export const DatasetSchema = z.union([PathDatasetSchema, RegistryDatasetConfigSchema]);
export type DatasetConfig = z.infer<typeof DatasetSchema>;

export type RegistryDatasetConfig = z.infer<typeof RegistryDatasetConfigSchema>;

/**
 * A process `rollout` starts before the job's trials and stops after (src/job/services.ts): a local model server,
 * say. `${VAR:-default}` in `command` and `ready_url` is resolved from the environment of `rollout`.
 */
const ServiceSchema = z.strictObject({
  name: z
    .string()
    .regex(/^[A-Za-z0-9][A-Za-z0-9._-]*$/, 'letters, digits, ".", "_" and "-" only (it names a log file)'),
  /** Run with bash. */
  command: z.string().min(1),
  /** The folder it runs in, relative to the job file; default: the job file's folder. */
  cwd: z.string().min(1).optional(),
  /** Polled until it answers (any HTTP status) before the job starts; without it, the job does not wait. */
  ready_url: z.string().min(1).optional(),
  ready_timeout_sec: z.number().positive().default(60),
});
export type ServiceConfig = z.infer<typeof ServiceSchema>;

/**
 * The checks of a job config that need the registries (agent names and options, provider settings, model prices,
 * variables a task may never read). They live where the job is loaded (src/job/checks.ts), so this contract loads no
 * provider or agent; they run inside the schema's refinements, so every problem is reported as before, in one pass.
 */
export interface JobConfigChecks {
  /** One agent entry: its built-in agent, its options, what it needs of the gateway. */
  agent(agent: AgentConfig, ctx: z.RefinementCtx): void;
  /** `environment:`: the provider's own settings (a provider loaded with `import` checks them once loaded). */
  environment(
    environment: { type: string; import?: string | undefined } & Record<string, unknown>,
    ctx: z.RefinementCtx
  ): void;
  /** Agent `index` within the whole job (a model without a price under the job's cost cap). */
  agentInJob(
    budget: { cost_usd?: number | undefined } | undefined,
    agent: AgentConfig,
    index: number,
    ctx: z.RefinementCtx
  ): void;
  /** A name of `environment.task_env_allow`. */
  taskEnvName(name: string, ctx: z.RefinementCtx): void;
}

/** No registry checks: the shape alone (for the keys and types derived from the schema). */
const NO_CHECKS: JobConfigChecks = { agent() {}, environment() {}, agentInJob() {}, taskEnvName() {} };

/** job.yaml `environment:` keys of every provider; the others are the provider's own (see providerKeys). */
const commonEnvironmentKeys = (checks: JobConfigChecks) => ({
  force_build: z.boolean().default(false),
  delete: z.boolean().default(true),
  override_cpus: quantity(parseCpus).optional(),
  override_memory: quantity(parseBytes).optional(),
  override_storage: quantity(parseBytes).optional(),
  /** Overrides every task's [environment] pids_limit. */
  pids_limit: z.number().int().positive().optional(),
  ...CAP_KEYS,
  /** Caps on what collect copies from an environment to the host, per trial (every step's logs and artifacts). */
  collect_max_bytes: quantity(parseBytes).default('1Gi'),
  collect_max_files: z.number().int().positive().default(10_000),
  /**
   * The most sandboxes of this provider the job holds at once (a cloud account's quota), on top of
   * n_concurrent_trials: the job runs min(n_concurrent_trials, max_sandboxes) trials at a time.
   */
  max_sandboxes: z.number().int().positive().optional(),
  /** Sandboxes created a second at most, by every worker together (default: src/environments/creation-rates.ts). */
  creates_per_second: z.number().positive().max(10_000).optional(),
  /** The worker variables a task's `${VAR}`s may read (src/task/task-env.ts); none by default. */
  task_env_allow: z
    .array(
      z
        .string()
        .regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'an environment variable name')
        .superRefine((name, ctx) => checks.taskEnvName(name, ctx))
    )
    .default([]),
});
const CORE_ENVIRONMENT_KEYS = new Set(['type', 'import', ...Object.keys(commonEnvironmentKeys(NO_CHECKS))]);

/** The provider's own keys of a job.yaml `environment:` (flat beside the common ones): what its settings schema reads. */
export function providerKeys(environment: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(environment).filter(([key]) => !CORE_ENVIRONMENT_KEYS.has(key)));
}

/** job.yaml's schema, with the registry checks given (src/job/checks.ts builds the one the loader uses). */
export function jobConfigSchema(checks: JobConfigChecks) {
  return z
    .strictObject({
      /** Any name; its folder under jobs_dir is derived from it (uniqueFolderName in src/job/plan.ts). */
      name: z
        .string()
        .regex(/\S/, 'must not be empty')
        // eslint-disable-next-line no-control-regex -- control characters are exactly what is refused
        .regex(/^[^\x00-\x1f\x7f]*$/, 'no control characters (it is shown on one line)')
        .max(200)
        .optional(),
      jobs_dir: z.string().min(1).default('jobs'),
      n_attempts: z.number().int().positive().default(1),
      n_concurrent_trials: z.number().int().positive().default(4),
      timeout_multiplier: z.number().positive().default(1),
      log_level: z.enum(LOG_LEVELS).default('info'),
      environment: z
        .looseObject({
          // Harbor's default: an environment without a type is Docker.
          type: z.string().min(1).default('docker'),
          /** A provider from outside the repository: an npm package or a path (relative to the job file) to load. */
          import: z.string().min(1).optional(),
          ...commonEnvironmentKeys(checks),
        })
        .superRefine((environment, ctx) => checks.environment(environment, ctx))
        .prefault({}),
      verifier: z
        .strictObject({
          override_timeout_sec: optionalSeconds,
          max_timeout_sec: optionalSeconds,
          disable: z.boolean().default(false),
        })
        .prefault({}),
      metrics: z
        .array(z.strictObject({ type: z.enum(METRIC_TYPES) }))
        .min(1)
        .default([{ type: 'mean' }]),
      /** Trials that end in one of these errors run again, up to max_retries times, after a jittered backoff. */
      retry: z
        .strictObject({
          error_types: z.array(z.enum(RETRYABLE_ERROR_TYPES)).default([...API_ERROR_TYPES]),
          max_retries: z.number().int().nonnegative().default(3),
          min_wait_sec: z.number().nonnegative().default(1),
          max_wait_sec: z.number().nonnegative().default(60),
        })
        .optional(),
      /** Limits on model calls through the gateway, shared by every worker of the deployment (docs/agents.md). */
      rate_limits: z.array(RateLimitSchema).default([]),
      budget: BudgetSchema.optional(),
      /** The policy (model weights) version stamped on each model call; `rollout ctl <job> policy-version N` changes it. */
      policy_version: z.number().int().nonnegative().optional(),
      agents: z
        .array(AgentSchema.superRefine((agent, ctx) => checks.agent(agent, ctx)))
        .min(1, 'at least one agent is required'),
      datasets: z.array(DatasetSchema).min(1, 'at least one dataset is required'),
      services: z.array(ServiceSchema).default([]),
    })
    .superRefine((job, ctx) => {
      const services = new Set<string>();
      job.services.forEach((service, index) => {
        if (services.has(service.name))
          ctx.addIssue({
            code: 'custom',
            path: ['services', index, 'name'],
            message: `duplicate service "${service.name}"`,
          });
        services.add(service.name);
      });
      const seen = new Set<string>();
      job.agents.forEach((agent, index) => {
        if (seen.has(agent.name))
          ctx.addIssue({ code: 'custom', path: ['agents', index, 'name'], message: `duplicate agent "${agent.name}"` });
        seen.add(agent.name);
        checks.agentInJob(job.budget, agent, index, ctx);
      });
    });
}

export type JobConfigInput = z.input<ReturnType<typeof jobConfigSchema>>;
export type JobConfig = z.infer<ReturnType<typeof jobConfigSchema>>;

/** One rate_limits rule as the gateway applies it. */
export interface RateLimitRule {
  /** Which calls the rule covers: the upstream (vendor) and a model glob; absent keys match everything. */
  match: { upstream?: Vendor; model?: string };
  requests_per_minute?: number;
  input_tokens_per_minute?: number;
  /** Calls in flight at once toward the matched upstream, per worker (the adaptive limit gives way to it). */
  max_concurrent?: number;
}
