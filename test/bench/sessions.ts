/**
 * `npm run bench -- sessions`: session create latency (cold, and from the warm pool), step round trip for `echo`
 * against the bare Docker exec it wraps, and sessions in parallel — through the real `rollout serve`, Temporal and
 * Docker of this machine. Prints figures; asserts nothing about time.
 */
import { mkdir, mkdtemp, writeFile } from 'node:fs/promises';
import os, { tmpdir } from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';

import Docker from 'dockerode';

import { stepExec } from '../../activities/session';
import { createEnvironment } from '../../src/environments';
import { LABEL_TRIAL } from '../../src/contracts/environment';
import { removeJobLeftovers } from '../support/docker';
import { freePort, ServeProcess } from '../support/serve';
import { TEST_HOST_ID, testTemporal } from '../support/temporal';
import { waitFor } from '../support/wait';

const WARM = 4;
/** Creates from the warm pool taken one at a time, the pool refilled in between. */
const SPACED = 6;
const STEPS = 50;
const PARALLEL = 4;

function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

const fmt = (values: number[]) =>
  `p50 ${percentile(values, 50).toFixed(1)} ms, p99 ${percentile(values, 99).toFixed(1)} ms (n=${values.length})`;

export async function sessionsBenchmark(): Promise<void> {
  const { client, connection } = await testTemporal();
  const dir = await mkdtemp(path.join(tmpdir(), 'rollout-bench-sessions-'));
  const name = `bench-sessions-${Date.now().toString(36)}`;
  for (const task of ['cold', 'warm']) {
    const taskDir = path.join(dir, 'tasks', task);
    await mkdir(path.join(taskDir, 'tests'), { recursive: true });
    await mkdir(path.join(taskDir, 'environment'), { recursive: true });
    await writeFile(
      path.join(taskDir, 'task.toml'),
      'version = "1.0"\n[environment]\ndocker_image = "debian:bookworm-slim"\n'
    );
    await writeFile(path.join(taskDir, 'environment', 'Dockerfile'), 'FROM debian:bookworm-slim\n');
    await writeFile(path.join(taskDir, 'instruction.md'), 'Say hi.\n');
    await writeFile(path.join(taskDir, 'tests', 'test.sh'), 'echo 1 > /logs/verifier/reward.txt\n');
  }
  const port = await freePort();
  await writeFile(
    path.join(dir, 'serve.yaml'),
    [
      `dataset: tasks`,
      `name: ${name}`,
      'jobs_dir: jobs',
      `port: ${port}`,
      'sessions:',
      `  warm_pool: { warm: ${WARM} }`,
      '',
    ].join('\n')
  );
  const server = new ServeProcess(`http://127.0.0.1:${port}`, dir, 'bench-token');
  await server.start();
  try {
    const create = async (task: string) => {
      const started = performance.now();
      const { http, body } = await server.json<{ session_id: string }>('/sessions', { body: { task } });
      if (http !== 200) throw new Error(`create ${task}: ${http} ${JSON.stringify(body)}`);
      return { id: body.session_id, ms: performance.now() - started };
    };
    const step = async (id: string, command: string) => {
      const started = performance.now();
      const { http, body } = await server.json<{ observation: string }>(`/sessions/${id}/step`, {
        body: { tool_call: { name: 'bash', arguments: { command } } },
      });
      if (http !== 200) throw new Error(`step: ${http} ${JSON.stringify(body)}`);
      return performance.now() - started;
    };
    const end = (id: string) => server.json(`/sessions/${id}`, { method: 'DELETE' });

    // Warm sessions parked and ready before measuring.
    await waitFor(
      `${WARM} warm sessions parked`,
      async () => {
        const ready = await client.workflow.count(
          `WorkflowType = "sessionWorkflow" AND RolloutTask = "warm" AND ExecutionStatus = "Running" AND RolloutJob = "${name}"`
        );
        return ready.count >= WARM;
      },
      300_000
    );
    await new Promise((resolve) => setTimeout(resolve, 20_000));

    const createLoad = os.loadavg()[0]!;
    const cold: number[] = [];
    for (let i = 0; i < 3; i++) {
      const session = await create('cold');
      cold.push(session.ms);
      await end(session.id);
    }
    // From the warm pool: one at a time with the pool topped up again in between, then a burst of back-to-back
    // creates while the replacements of the ones just taken start (their container starts share the 2 cores).
    const docker = new Docker();
    const jobContainers = async () =>
      (await docker.listContainers({ filters: { label: [`rollout.job=${name}`] } })).length;
    const warmSpaced: number[] = [];
    const warmBurst: number[] = [];
    const warmIds: string[] = [];
    for (let i = 0; i < SPACED; i++) {
      const session = await create('warm');
      warmSpaced.push(session.ms);
      // Ended at once: the worker's --max-trials slots hold the parked sessions and the ones taken.
      await end(session.id);
      await waitFor('the warm pool refilled', async () => (await jobContainers()) === WARM, 120_000);
      await new Promise((resolve) => setTimeout(resolve, 2_000));
    }
    for (let i = 0; i < WARM; i++) {
      const session = await create('warm');
      warmBurst.push(session.ms);
      warmIds.push(session.id);
    }

    const id = warmIds[0]!;
    await step(id, 'echo warm-up');
    const [container] = await docker.listContainers({ filters: { label: [`${LABEL_TRIAL}=${name}/session__${id}`] } });
    if (!container) throw new Error('session container not found');
    const environment = createEnvironment('docker', { hostId: TEST_HOST_ID, deployment: 'bench' });
    const timed = async (work: () => Promise<unknown>) => {
      const started = performance.now();
      await work();
      return performance.now() - started;
    };
    // Interleaved rounds (step over HTTP, the bare exec it wraps, that exec with the step's wrapper), so the load of
    // the shared machine weighs on all three alike; each round's step/bare ratio is kept.
    const rounds: number[] = [];
    const bare: number[] = [];
    const wrapped: number[] = [];
    const ratios: number[] = [];
    const stepLoad = os.loadavg()[0]!;
    for (let i = 0; i < STEPS; i++) {
      rounds.push(await step(id, 'echo hi'));
      bare.push(await timed(() => environment.exec({ id: container.Id, workdir: '/' }, { command: 'echo hi' })));
      wrapped.push(
        await timed(() => environment.exec({ id: container.Id, workdir: '/' }, stepExec('echo hi', 64 * 1024)))
      );
      ratios.push(rounds[i]! / bare[i]!);
    }
    await Promise.all(warmIds.map(end));

    const parallelLoad = os.loadavg()[0]!;
    const parallelStarted = performance.now();
    const perSession = await Promise.all(
      Array.from({ length: PARALLEL }, async () => {
        const session = await create('cold');
        const times: number[] = [];
        for (let i = 0; i < 10; i++) times.push(await step(session.id, 'echo hi'));
        await end(session.id);
        return times;
      })
    );
    const parallelMs = performance.now() - parallelStarted;
    const parallelSteps = perSession.flat();

    const load = (at: number) => `load1 ${at.toFixed(1)}`;
    console.log(`sessions benchmark (${new Date().toISOString()}, this machine, ${os.cpus().length} cores)`);
    console.log(`  create, cold (no pool):         ${fmt(cold)}  [${load(createLoad)}]`);
    console.log(`  create, from the warm pool:     ${fmt(warmSpaced)}  (one at a time, the pool full)`);
    console.log(`  create, warm, ${WARM} back to back:  ${fmt(warmBurst)}  (while the taken ones' replacements start)`);
    console.log(
      `  step round trip (echo, HTTP):   ${fmt(rounds)}  [${load(stepLoad)}, interleaved with the two below]`
    );
    console.log(`  bare docker exec (echo):        ${fmt(bare)}`);
    console.log(`  the step's exec (wrapped echo): ${fmt(wrapped)}`);
    console.log(
      `  overhead over bare exec:        p50 ${(percentile(rounds, 50) - percentile(bare, 50)).toFixed(1)} ms ` +
        `(of it the step's wrapper: ${(percentile(wrapped, 50) - percentile(bare, 50)).toFixed(1)} ms); ` +
        `step / bare exec per round: median ${percentile(ratios, 50).toFixed(2)}`
    );
    console.log(
      `  ${PARALLEL} sessions in parallel:        create + 10 steps each in ${(parallelMs / 1000).toFixed(1)} s; ` +
        `steps ${fmt(parallelSteps)}  [${load(parallelLoad)}]`
    );
  } finally {
    await server.stop('SIGTERM');
    const left = await new Docker().listContainers({ all: true, filters: { label: [`rollout.job=${name}`] } });
    console.log(`  containers left after shutdown: ${left.length}`);
    await removeJobLeftovers(name);
    await connection.close();
  }
}
