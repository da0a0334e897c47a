/**
 * `npm run bench -- chaos [trials] [concurrent] [--server dev|cluster] [--workers n] [--hold s] [--kill-every s]
 * [--429 share] [--creates-per-second n]`: a job under chaos (test/support/chaos-run.ts) on a fresh server of its
 * own: worker processes killed with SIGKILL every few seconds, the server restarted once, the simulated vendor
 * answering a share of calls 429. Prints what was lost, duplicated and left, and what the run cost.
 */
import { connectClient, ensureSearchAttributes } from '../../src/temporal/connect';
import { runChaosJob } from '../support/chaos-run';
import type { ChaosReport } from '../support/chaos-run';
import { benchServer, historyTotals } from './scale';

export async function chaosBenchmark(args: string[]): Promise<void> {
  const flag = (name: string, fallback: number) =>
    args.includes(name) ? Number(args[args.indexOf(name) + 1]) : fallback;
  const positional = args.filter((arg, i) => /^\d+$/.test(arg) && !args[i - 1]?.startsWith('--'));
  const trials = Number(positional[0] ?? 10_000);
  const concurrent = Number(positional[1] ?? 2_000);
  const kind = args.includes('--server') ? args[args.indexOf('--server') + 1] : 'dev';
  if (kind !== 'dev' && kind !== 'cluster') throw new Error(`--server: expected dev or cluster, got "${kind}"`);
  console.error(`chaos on the ${kind} server: starting it`);
  const server = await benchServer(kind);
  const { client, connection } = await connectClient({ address: server.address, namespace: 'default', uiUrl: null });
  try {
    await ensureSearchAttributes(connection, 'default');
    const dataBefore = await server.dataBytes();
    const report = await runChaosJob({
      client,
      address: server.address,
      trials,
      concurrent,
      workers: flag('--workers', 4),
      holdSec: flag('--hold', 20),
      killEveryMs: flag('--kill-every', 5) * 1000,
      rateLimited: flag('--429', 0.1),
      createsPerSecond: flag('--creates-per-second', 200),
      restartServer: () => server.restart(),
      timeoutMs: 4 * 3600_000,
      leakWaitMs: 105_000,
      progress: (line) => console.error(line),
    });
    const history = await historyTotals(client, report.jobName);
    const dataGrowth = (await server.dataBytes()) - dataBefore;
    print(kind, report, { ...history, dataGrowth });
  } finally {
    await connection.close();
    await server.stop();
  }
}

function print(
  kind: string,
  r: ChaosReport,
  growth: { events: number; bytes: number; trials: number; trialEvents: number; dataGrowth: number }
): void {
  const mib = (bytes: number) => `${(bytes / 2 ** 20).toFixed(0)} MiB`;
  const finished = r.completed + r.errored + r.infrastructureErrors;
  console.log(
    `chaos on the ${kind} server: ${r.trials} trials, ${r.peakRunning} running at most, ${r.peakHeld} sandboxes ` +
      `held at once, ${r.seconds.toFixed(0)} s`
  );
  console.log(
    `  completed ${r.completed}, errored ${r.errored}, infrastructure errors ${r.infrastructureErrors}, ` +
      `lost ${r.lost}, duplicated ${r.duplicated}`
  );
  // The distinct errors, each with how many trials ended with it.
  const errors = new Map<string, number>();
  for (const failure of r.failures) {
    const error = failure.replace(/^[^:]*: /, ''); // "<trial>: <error>"
    errors.set(error, (errors.get(error) ?? 0) + 1);
  }
  for (const [error, count] of errors) console.log(`    ${count} × ${error}`);
  console.log(
    `  sandboxes left: ${r.sandboxesLeftAtEnd} as the job ended, ${r.sandboxesLeft} after the reaper's period; ` +
      `${r.reverifiedOnFreshSandbox} trials scored again on a fresh sandbox after a restart`
  );
  console.log(
    `  chaos: ${r.kills} worker kills (SIGKILL), server restart took ${r.serverRestartSec.toFixed(1)} s, ` +
      `${r.rateLimitReplies} of ${r.calls} vendor calls answered 429; ` +
      `${r.workerCrashes.length} workers exited without being killed`
  );
  for (const crash of r.workerCrashes) console.log(`    ${crash.split('\n')[0]}`);
  console.log(
    `  creates: ${r.creates}, ${r.createsPerSecond.toFixed(1)}/s; ${(finished / r.seconds).toFixed(1)} trials/s`
  );
  console.log(
    `  orchestration per trial (wall time less the agent's hold): p50 ${(r.orchestrationMs.p50 / 1000).toFixed(2)} s, ` +
      `p99 ${(r.orchestrationMs.p99 / 1000).toFixed(2)} s`
  );
  const perThousand = ((r.workerRss.peak - r.workerRss.idle) / Math.max(1, r.peakRunning)) * 1000;
  console.log(
    `  worker memory: ${mib(r.workerRss.idle)} idle, ${mib(r.workerRss.peak)} peak (all workers) = ` +
      `${mib(perThousand)} per 1,000 concurrent trials`
  );
  console.log(
    `  Temporal history per trial: ${(growth.events / finished).toFixed(1)} events, ` +
      `${(growth.bytes / finished / 1024).toFixed(1)} KiB; database growth ${mib(growth.dataGrowth)} = ` +
      `${(growth.dataGrowth / finished / 1024).toFixed(1)} KiB per trial`
  );
  console.log(`  load average (1 min): mean ${r.load.mean.toFixed(2)}, max ${r.load.max.toFixed(2)}`);
}
