/**
 * `npm run bench -- agents [gateway | agent...]`: the latency the model gateway adds per call (gateway-latency.ts),
 * then per catalogue agent that installs (or the ones named), the cold install (a fresh container FROM
 * debian:bookworm-slim, everything from the registries), the snapshot commit, and the cached install (a container
 * started from the snapshot: the install finds the agent in place). Real Docker, real registries; prints figures.
 * `gateway` alone measures only the gateway.
 */
import { randomBytes } from 'node:crypto';
import { cpus, loadavg } from 'node:os';

import type { AgentRun } from '../../src/contracts/agent';
import { createAgent } from '../../src/agents/create';
import { BUILTIN_AGENTS } from '../../src/agents/registry';
import { CA_TRUST_ENV, hostCaBundle, caBundleStart } from '../../src/environments/ca-trust';
import { DockerEnvironment } from '../../src/environments/docker';
import { AgentSchema } from '../../src/contracts/job-config';
import type { Task } from '../../src/task/load';
import type { EnvironmentHandle } from '../../src/contracts/trial';
import { gatewayLatencyBenchmark } from './gateway-latency';

const BASE_IMAGE = 'debian:bookworm-slim';
const INSTALL_TIMEOUT_MS = 15 * 60_000;

export async function agentsBenchmark(names: string[]): Promise<void> {
  await gatewayLatencyBenchmark();
  if (names.length === 1 && names[0] === 'gateway') return;
  console.log('');
  const agents = BUILTIN_AGENTS.filter((a) => a.kind === 'installed' && (names.length === 0 || names.includes(a.name)));
  const job = `bench-agents-${randomBytes(3).toString('hex')}`;
  const environment = new DockerEnvironment({ hostId: job, deployment: job });
  const bundle = await hostCaBundle('auto');
  const rows: string[][] = [['agent', 'version', 'cold install s', 'snapshot s', 'cached install s', 'result']];
  for (const definition of agents) {
    const config = AgentSchema.parse({ name: definition.name });
    const agent = createAgent(config);
    let snapshot: string | null = null;
    const row = [definition.name, '', '', '', '', ''];
    try {
      const start = async (image: string, trial: string) => {
        const { handle } = await environment.start({
          image,
          jobName: job,
          trialId: `${job}/${trial}`,
          trialName: trial,
          workerId: job,
          resources: { cpus: 2, memoryBytes: 4 * 1024 ** 3, storageBytes: 0, pidsLimit: 4096 },
          env: bundle ? { ...CA_TRUST_ENV } : {},
          ...(bundle ? caBundleStart(bundle) : {}),
        });
        return handle;
      };
      const install = async (handle: EnvironmentHandle) => {
        const begun = Date.now();
        const result = await agent.install(runOn(environment, handle));
        if (result?.exitCode !== 0) throw new Error(`install exited ${result?.exitCode}: see the container's /logs`);
        return { seconds: (Date.now() - begun) / 1000, version: result.version ?? '?' };
      };
      const cold = await start(BASE_IMAGE, `${definition.name}-cold`);
      const first = await install(cold);
      row[1] = first.version;
      row[2] = first.seconds.toFixed(1);
      const committing = Date.now();
      snapshot = await environment.snapshots.take(cold, `bench-${definition.name}`, definition.name);
      row[3] = ((Date.now() - committing) / 1000).toFixed(1);
      const cached = await start(snapshot, `${definition.name}-cached`);
      row[4] = (await install(cached)).seconds.toFixed(1);
      row[5] = 'ok';
    } catch (err) {
      row[5] = (err as Error).message.split('\n')[0] ?? 'failed';
    } finally {
      for (const step of ['cold', 'cached']) await environment.removeTrial(`${job}/${definition.name}-${step}`);
      if (snapshot) await environment.removeImage(snapshot);
    }
    rows.push(row);
    console.log(row.join('\t'));
  }
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  console.log(`\n${rows.map((r) => r.map((c, i) => c.padEnd(widths[i]!)).join('  ')).join('\n')}`);
  console.log(`\nload average ${loadavg()[0]!.toFixed(1)} on ${cpus().length} cores`);
  console.log(`CA trust: ${bundle ? `host bundle ${bundle}` : 'off (no extra CAs on this host)'}`);
}

function runOn(environment: DockerEnvironment, handle: EnvironmentHandle): AgentRun {
  return {
    environment,
    handle,
    task: {} as Task, // installs do not read the task
    env: {},
    solutionEnv: {},
    gateway: null,
    timeoutMs: INSTALL_TIMEOUT_MS,
    signal: new AbortController().signal,
    agentLogsDir: '/nonexistent',
  };
}
