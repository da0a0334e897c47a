import type { AddressInfo } from 'node:net';

import { isOracle } from '../agents/config';
import { Rollout } from '../api/rollout';
import { InputError } from '../contracts/errors';
import { parseJobConfig } from '../job/load';
import { planJob } from '../job/plan';
import { saveJobConfig } from '../api/submit';
import type { ServeConfig } from '../serve/config';
import { loadServeConfig } from '../serve/config';
import { RemoteRollouts } from '../serve/remote-rollouts';
import { buildServer } from '../serve/server';
import type { SessionTask } from '../serve/sessions';
import { Sessions } from '../serve/sessions';
import { loadTask } from '../task/load';
import type { TrialSpec } from '../contracts/trial';

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
  evalProtocolLoopback?: boolean;
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
    eval_protocol: flags.evalProtocolLoopback ? { loopback_without_token: true } : undefined,
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
  /** The port this server listens on (known once it listens, which is before any request). */
  let port = config.port;
  const rollouts = new RemoteRollouts(rollout.client, tasks, job, jobDir, config.task_from, (url) =>
    isThisServer(url, port, config.host)
  );
  const sessions = new Sessions(
    rollout.client,
    job,
    config.dataset,
    await sessionTasks(tasks),
    {
      idleTimeoutSec: config.sessions.idle_timeout_sec,
      maxLifetimeSec: config.sessions.max_lifetime_sec,
      stepTimeoutSec: config.sessions.step_timeout_sec,
      outputLimitBytes: config.sessions.output_limit_bytes,
    },
    config.sessions.warm_pool
  );
  const app = buildServer({
    token,
    rollouts,
    routes: sessions.routes(),
    evalProtocolLoopbackWithoutToken: config.eval_protocol.loopback_without_token,
  });
  const address = await app.listen({ port: config.port, host: config.host });
  port = (app.server.address() as AddressInfo).port;
  sessions.startPool();
  console.error(
    `rollout serve: ${address} · dataset ${config.dataset} · agent ${config.agentConfig.name} · results ${jobDir}`
  );

  await new Promise<void>((resolve) => {
    process.once('SIGINT', resolve);
    process.once('SIGTERM', resolve);
  });
  await app.close();
  await sessions.closePool();
  await rollout.close();
  return 0;
}

/** A URL of this server: its port, on loopback or the address it listens on. */
function isThisServer(url: URL, port: number, listenHost: string): boolean {
  const urlPort = url.port || (url.protocol === 'https:' ? '443' : '80');
  const host = url.hostname.replace(/^\[|\]$/g, '');
  return urlPort === String(port) && ['localhost', '127.0.0.1', '::1', listenHost].includes(host);
}

async function sessionTasks(tasks: Map<string, TrialSpec>): Promise<Map<string, SessionTask>> {
  const entries = await Promise.all(
    [...tasks].map(async ([name, spec]) => {
      const loaded = await loadTask(spec.taskDir);
      if (!loaded.task) throw new InputError(loaded.problems);
      return [name, { spec, instruction: loaded.task.instruction }] as const;
    })
  );
  return new Map(entries);
}

/** The job folder rollouts and sessions write to, and one planned trial per task of the dataset. */
async function planServeJob(config: ServeConfig): Promise<{ job: string; tasks: Map<string, TrialSpec> }> {
  const job = parseJobConfig(
    {
      name: config.name,
      jobs_dir: config.jobs_dir,
      environment: { type: config.environment },
      // A remote rollout's model calls are recorded like a trial's (llm-calls, ATIF, usage), and the /init key
      // stays on the worker: the agent is on the gateway unless its job.yaml says `gateway: false`.
      agents: [{ ...config.agentConfig, gateway: config.agentConfig.gateway ?? !isOracle(config.agentConfig) }],
      datasets: [{ path: config.dataset }],
    },
    'rollout serve',
    process.cwd()
  );
  const plan = await planJob(job);
  await saveJobConfig(job, plan.jobDir);
  return { job: job.name, tasks: new Map(plan.trials.map((t) => [t.spec.taskName, t.spec])) };
}
