/** serve.yaml, or the same keys as `rollout serve` flags: what the HTTP service runs and how. */
import { readFile } from 'node:fs/promises';
import path from 'node:path';

import { parse as parseYaml } from 'yaml';
import { z } from 'zod';

import { InputError, zodProblems } from '../contracts/errors';
import type { AgentConfig } from '../contracts/job-config';
import { ORACLE_AGENT } from '../contracts/job-config';
import { ENVIRONMENT_TYPES } from '../environments/registry';
import { loadJobFile } from '../job/load';

export const ServeConfigSchema = z.strictObject({
  /** A task folder or a folder of task folders. */
  dataset: z.string().min(1),
  /** A built-in agent's name, or a job.yaml whose first agent is used. */
  agent: z.string().min(1).default(ORACLE_AGENT),
  /** Names the job folder remote rollouts and sessions write to. */
  name: z
    .string()
    .regex(/^[A-Za-z0-9][A-Za-z0-9._-]*$/)
    .default('serve'),
  jobs_dir: z.string().min(1).default('jobs'),
  environment: z.enum(ENVIRONMENT_TYPES).default('docker'),
  host: z.string().default('127.0.0.1'),
  port: z.number().int().min(0).max(65535).default(8080),
  /** Which part of an /init request names the task. */
  task_from: z.enum(['row_id', 'first_user_message']).default('row_id'),
  eval_protocol: z
    .strictObject({
      /**
       * Eval Protocol's RemoteRolloutProcessor sends /init without a token: accept its requests (/init and the
       * tracing endpoints) from loopback addresses without one. Off by default; never behind a proxy on this host.
       */
      loopback_without_token: z.boolean().default(false),
    })
    .prefault({}),
  sessions: z
    .strictObject({
      idle_timeout_sec: z.number().positive().default(600),
      max_lifetime_sec: z.number().positive().default(3600),
      step_timeout_sec: z.number().positive().default(60),
      output_limit_bytes: z
        .number()
        .int()
        .positive()
        .default(64 * 1024),
      /** Sessions kept started ahead of demand, per task name: `{ my-task: 4 }`. */
      warm_pool: z.record(z.string(), z.number().int().nonnegative()).default({}),
    })
    .prefault({}),
});
export type ServeConfig = z.infer<typeof ServeConfigSchema> & { agentConfig: AgentConfig };

/** Reads --config serve.yaml (paths relative to it) and/or the flags (relative to the working folder). */
export async function loadServeConfig(file: string | undefined, flags: Record<string, unknown>): Promise<ServeConfig> {
  let raw: Record<string, unknown> = {};
  let base = process.cwd();
  const source = file ? path.resolve(file) : 'rollout serve';
  if (file) {
    let text: string;
    try {
      text = await readFile(source, 'utf8');
    } catch (err) {
      throw new InputError([{ file: source, message: `unreadable (${(err as NodeJS.ErrnoException).code})` }]);
    }
    const parsed: unknown = parseYaml(text);
    if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) {
      throw new InputError([{ file: source, message: 'expected a mapping of serve keys (dataset, agent, …)' }]);
    }
    raw = parsed as Record<string, unknown>;
    base = path.dirname(source);
  }
  const merged = { ...raw, ...Object.fromEntries(Object.entries(flags).filter(([, v]) => v !== undefined)) };
  const parsed = ServeConfigSchema.safeParse(merged);
  if (!parsed.success) throw new InputError(zodProblems(source, parsed.error.issues));
  const config = parsed.data;
  // Paths given in serve.yaml are relative to it; paths given as flags to the working folder.
  const relativeTo = (key: string) => (file && flags[key] === undefined ? base : process.cwd());
  return {
    ...config,
    dataset: path.resolve(relativeTo('dataset'), config.dataset),
    jobs_dir: path.resolve(relativeTo('jobs_dir'), config.jobs_dir),
    agentConfig: await resolveAgent(config.agent, relativeTo('agent')),
  };
}

async function resolveAgent(agent: string, base: string): Promise<AgentConfig> {
  if (agent === ORACLE_AGENT) return { name: ORACLE_AGENT, env: {}, install_timeout_sec: 900 };
  if (!/\.(ya?ml|json)$/.test(agent)) {
    throw new InputError([
      {
        file: 'rollout serve',
        field: 'agent',
        message: `unknown agent "${agent}": built-in agents are [${ORACLE_AGENT}], or give a job.yaml`,
      },
    ]);
  }
  const job = await loadJobFile(path.resolve(base, agent));
  return job.agents[0]!;
}
