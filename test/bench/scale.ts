/**
 * `npm run bench -- scale [trials]`: a large job (default 10,000 trials) of a trivial task on the local
 * environment, to measure orchestration: trials/second, worker RSS over the run, Job history sizes and how often
 * the Job continued-as-new. Runs against the tests' Temporal dev server.
 */
import { randomBytes } from 'node:crypto';

import { Runtime, DefaultLogger } from '@temporalio/worker';

import { localWorkers, runHistoryLengths, submitJob, writeLocalJob } from '../support/local-job';
import { testTemporal } from '../support/temporal';

export async function scaleBenchmark(trials: number): Promise<void> {
  Runtime.install({ logger: new DefaultLogger('WARN') });
  const { client, connection } = await testTemporal();
  const name = `scale-${randomBytes(3).toString('hex')}`;
  const jobFile = await writeLocalJob({ name, attempts: trials, concurrency: 64 });
  const { connection: workerConnection, workers } = await localWorkers({ hostId: `bench-${name}`, maxTrials: 64 });
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
