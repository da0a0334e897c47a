/**
 * A worker process's gateway under a shared limit, as a process of its own: the ModelGateway, TemporalRateLimits and
 * TemporalConcurrencyShares a worker builds (no trials: the calls come from this process, as fast as CONCURRENCY
 * allows), against an upstream given by UPSTREAM_URL, under a rule of RPM requests a minute or MAX_CONCURRENT calls
 * at once (deployment-wide). Prints `{"calls":n}` after DURATION_MS.
 * Env: TEMPORAL_ADDRESS, DEPLOYMENT, TASK_QUEUE, UPSTREAM_URL, RPM or MAX_CONCURRENT, DURATION_MS, CONCURRENCY, NAME.
 */
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';

import { Client, Connection } from '@temporalio/client';

import { ModelGateway } from '../../src/gateway/gateway';
import { upstreamsFromEnv } from '../../src/gateway/upstreams';
import { TemporalConcurrencyShares } from '../../src/limits/shared-concurrency';
import { TemporalRateLimits } from '../../src/limits/shared-rate-limits';

async function main(): Promise<void> {
  const env = (name: string) => {
    const value = process.env[name];
    if (!value) throw new Error(`${name} is not set`);
    return value;
  };
  const connection = await Connection.connect({ address: env('TEMPORAL_ADDRESS') });
  const client = new Client({ connection });
  const gateway = new ModelGateway({
    sharedLimits: new TemporalRateLimits(client, env('DEPLOYMENT'), env('TASK_QUEUE')),
    sharedConcurrency: new TemporalConcurrencyShares(client, env('DEPLOYMENT'), env('TASK_QUEUE')),
  });
  const limit = process.env.MAX_CONCURRENT
    ? { max_concurrent: Number(process.env.MAX_CONCURRENT) }
    : { requests_per_minute: Number(env('RPM')) };
  const session = await gateway.openTrial({
    trialId: `rate/${env('NAME')}`,
    agentDir: await mkdtemp(path.join(tmpdir(), 'rollout-rate-')),
    upstreams: upstreamsFromEnv({ OPENAI_BASE_URL: env('UPSTREAM_URL'), OPENAI_API_KEY: 'k' }),
    rateLimits: [{ match: { upstream: 'openai' }, ...limit }],
  });
  const access = await session.access();
  const until = Date.now() + Number(env('DURATION_MS'));
  let calls = 0;
  const loop = async () => {
    while (Date.now() < until) {
      const res = await fetch(`${access.baseUrls.openai}/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${access.token}` },
        body: JSON.stringify({ model: 'gpt-5', messages: [{ role: 'user', content: 'go' }] }),
      });
      await res.arrayBuffer();
      if (res.status !== 200) throw new Error(`HTTP ${res.status}`);
      calls += 1;
    }
  };
  await Promise.all(Array.from({ length: Number(env('CONCURRENCY')) }, loop));
  await session.close();
  await gateway.close();
  await connection.close();
  console.log(JSON.stringify({ calls }));
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
