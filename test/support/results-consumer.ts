/**
 * A trainer's own process for the library tests: attaches to a running job by name and prints the trial name of each
 * result delivered to `consumer`, one line each, until every result of the job is delivered.
 *
 * usage: node results-consumer.js <temporal address> <job name> <consumer>
 */
import { Rollout } from 'rollout-agents';

async function main(): Promise<void> {
  const [address, jobName, consumer] = process.argv.slice(2);
  const rollout = await Rollout.connect({ address: address!, worker: false });
  try {
    const job = await rollout.job(jobName!);
    for await (const result of job.results({ consumer: consumer!, pollMs: 100 })) {
      process.stdout.write(`${result.trial_name}\n`);
    }
  } finally {
    await rollout.close();
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
