import { Rollout } from '../api/rollout';
import { InputError } from '../errors';
import { parseJobConfig } from '../job/load';
import { planJob } from '../job/plan';
import { saveJobConfig } from '../job/submit';
import type { ServeConfig } from '../serve/config';
import { loadServeConfig } from '../serve/config';
import { RemoteRollouts } from '../serve/remote-rollouts';
import { buildServer } from '../serve/server';
import type { TrialSpec } from '../trial/types';

export interface ServeFlags {
  config?: string;
  dataset?: string;
  agent?: string;
  port?: number;
  host?: string;
  jobsDir?: string;
  env?: string;
  worker: boolean;
  hostId?: string;
  maxTrials?: number;
}

/**
 * `rollout serve`: the HTTP service on the same Temporal server and workers as everything else; runs until SIGINT
 * or SIGTERM. Everything it starts is a workflow, so a restart loses nothing.
 */
export async function serve(flags: ServeFlags): Promise<number> {
  const token = process.env.ROLLOUT_SERVE_TOKEN;
  if (!token) {
    throw new InputError([
      {
        file: 'environment',
        field: 'ROLLOUT_SERVE_TOKEN',
        message: 'not set: every request must carry it as a bearer token',
      },
    ]);
  }
  const config = await loadServeConfig(flags.config, {
    dataset: flags.dataset,
    agent: flags.agent,
    port: flags.port,
    host: flags.host,
    jobs_dir: flags.jobsDir,
    environment: flags.env,
  });
  const { job, tasks } = await planServeJob(config);
  const rollout = await Rollout.connect({
    worker: flags.worker && {
      environmentTypes: [config.environment],
      maxTrials: flags.maxTrials ?? 8,
      ...(flags.hostId ? { hostId: flags.hostId } : {}),
    },
  });
  const jobDir = tasks.values().next().value!.jobDir;
  const rollouts = new RemoteRollouts(rollout.client, tasks, job, jobDir, config.task_from);
  const app = buildServer({ token, rollouts });
  const address = await app.listen({ port: config.port, host: config.host });
  console.error(
    `rollout serve: ${address} · dataset ${config.dataset} · agent ${config.agentConfig.name} · results ${jobDir}`
  );

  await new Promise<void>((resolve) => {
    process.once('SIGINT', resolve);
    process.once('SIGTERM', resolve);
  });
  await app.close();
  await rollout.close();
  return 0;
}

/** The job folder rollouts and sessions write to, and one planned trial per task of the dataset. */
async function planServeJob(config: ServeConfig): Promise<{ job: string; tasks: Map<string, TrialSpec> }> {
  const job = parseJobConfig(
    {
      name: config.name,
      jobs_dir: config.jobs_dir,
      environment: { type: config.environment },
      agents: [config.agentConfig],
      datasets: [{ path: config.dataset }],
    },
    'rollout serve',
    process.cwd()
  );
  const plan = await planJob(job);
  await saveJobConfig(job, plan.jobDir);
  return { job: job.name, tasks: new Map(plan.trials.map((t) => [t.spec.taskName, t.spec])) };
}
