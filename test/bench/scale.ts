/**
 * `npm run bench -- scale [trials]`: a large job (default 10,000 trials) of a trivial task on the local
 * environment, to measure orchestration: trials/second, worker RSS over the run, Job history sizes and how often
 * the Job continued-as-new. Runs against the tests' Temporal dev server.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';

import { ensureDevServer, stopDevServer } from '../../src/temporal/dev-server';

import { localWorkers, runHistoryLengths, submitJob, writeLocalJob } from '../support/local-job';
import { connectClient, ensureSearchAttributes } from '../../src/temporal/connect';
import '../support/temporal'; // quiet worker logs

export async function scaleBenchmark(trials: number): Promise<void> {
  // A fresh server of its own, so figures do not depend on what earlier runs left in a database.
  const server = {
    stateDir: await mkdtemp(path.join(tmpdir(), 'rollout-bench-')),
    ip: '127.0.0.1',
    port: 17900,
    uiPort: 18900,
  };
  await ensureDevServer(server);
  const address = `${server.ip}:${server.port}`;
  const { client, connection } = await connectClient({ address, namespace: 'default', uiUrl: null });
  await ensureSearchAttributes(connection, 'default');
  const name = `scale-${randomBytes(3).toString('hex')}`;
  const jobFile = await writeLocalJob({ name, attempts: trials, concurrency: 64 });
  const { connection: workerConnection, workers } = await localWorkers({
    hostId: `bench-${name}`,
    maxTrials: 64,
    address,
  });
  const running = Promise.all(workers.map((w) => w.run()));

  const rss: number[] = [process.memoryUsage().rss];
  const sampler = setInterval(() => rss.push(process.memoryUsage().rss), 1000);
  const started = Date.now();
  const { handle } = await submitJob(client, jobFile);
  const progressTimer = setInterval(() => {
    handle
      .query('progress')
      .then((p) => console.error(`  ${(p as { finished: number }).finished}/${trials} finished`))
      .catch(() => undefined);
  }, 10_000);
  const final = await handle.result();
  const seconds = (Date.now() - started) / 1000;
  clearInterval(sampler);
  clearInterval(progressTimer);
  for (const worker of workers) worker.shutdown();
  await running;
  await workerConnection.close();

  const histories = await runHistoryLengths(client, `rollout-job/${name}`);
  await connection.close();
  await stopDevServer(server);
  const mb = (bytes: number) => `${(bytes / 2 ** 20).toFixed(0)} MiB`;
  const quarter = Math.max(1, Math.floor(rss.length / 4));
  console.log(
    `scale: ${final.finished}/${trials} trials in ${seconds.toFixed(1)} s = ${(final.finished / seconds).toFixed(1)} trials/s`
  );
  console.log(
    `  completed ${final.completed}, errored ${final.errored}, infrastructure errors ${final.infrastructureErrors}`
  );
  console.log(
    `  worker RSS: start ${mb(rss[0]!)}, peak ${mb(Math.max(...rss))}, mean of first quarter ${mb(mean(rss.slice(0, quarter)))}, ` +
      `mean of last quarter ${mb(mean(rss.slice(-quarter)))}, end ${mb(rss[rss.length - 1]!)}`
  );
  console.log(
    `  Job runs: ${histories.length} (continued-as-new ${final.continuedAsNew} times), longest history ${Math.max(...histories)} events`
  );
}

function mean(values: number[]): number {
  return values.reduce((a, b) => a + b, 0) / values.length;
}
