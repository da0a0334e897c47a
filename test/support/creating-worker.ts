/**
 * A worker process's sandbox creations under a shared pace, as a process of its own: the SandboxCreation gate and
 * TemporalCreationRate a worker builds (no trials: CREATES creations come from this process, CONCURRENCY at once),
 * each a `POST /sandboxes` to the vendor stand-in at STAND_IN_URL through withQuotaBackoff (as the cloud providers
 * call), under a pace of PER_SECOND creations a second (deployment-wide). Prints
 * `{"created":n,"lowestLimit":n,"finalLimit":n}`: the adaptive in-flight limit's lowest value shows its back-off.
 * Env: TEMPORAL_ADDRESS, DEPLOYMENT, TASK_QUEUE, STAND_IN_URL, PER_SECOND, CREATES, CONCURRENCY, NAME.
 */
import { Client, Connection } from '@temporalio/client';

import { withQuotaBackoff } from '../../src/environments/kit/quota';
import { SandboxCreation } from '../../src/environments/sandbox-creation';
import { TemporalCreationRate } from '../../src/limits/creation-rate';

class QuotaReply extends Error {}

async function main(): Promise<void> {
  const env = (name: string) => {
    const value = process.env[name];
    if (!value) throw new Error(`${name} is not set`);
    return value;
  };
  const connection = await Connection.connect({ address: env('TEMPORAL_ADDRESS') });
  const client = new Client({ connection });
  const creation = new SandboxCreation(new TemporalCreationRate(client, env('DEPLOYMENT'), env('TASK_QUEUE')));
  const perSecond = Number(env('PER_SECOND'));
  let remaining = Number(env('CREATES'));
  let created = 0;
  let lowestLimit = Infinity;
  const signal = new AbortController().signal;
  const createOne = async (n: number) => {
    const res = await fetch(`${env('STAND_IN_URL')}/sandboxes`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ name: `${env('NAME')}-${n}` }),
    });
    await res.arrayBuffer();
    if (res.status === 429) throw new QuotaReply('429 too many sandbox creations');
    if (res.status !== 201) throw new Error(`HTTP ${res.status}`);
  };
  const loop = async () => {
    while (remaining > 0) {
      const n = remaining--;
      await creation.create({ provider: 'stand-in', perSecond, owner: `trial-${n}`, signal }, () =>
        withQuotaBackoff(
          'stand-in',
          (err) => (err instanceof QuotaReply ? err.message : null),
          () => createOne(n),
          {
            minDelayMs: 50,
            maxDelayMs: 200,
            maxWaitMs: 60_000,
          }
        )
      );
      created += 1;
      lowestLimit = Math.min(lowestLimit, creation.state('stand-in')!.limit);
    }
  };
  await Promise.all(Array.from({ length: Number(env('CONCURRENCY')) }, loop));
  await connection.close();
  console.log(JSON.stringify({ created, lowestLimit, finalLimit: creation.state('stand-in')!.limit }));
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
