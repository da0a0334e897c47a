/** `npm run bench -- <name> [args]`: benchmarks print figures; they assert nothing about time. */
import { agentsBenchmark } from './agents';
import { chaosBenchmark } from './chaos';
import { cloudBenchmark } from './cloud';
import { dockerBenchmark } from './docker';
import { harborBenchmark } from './harbor';
import { scaleBenchmark } from './scale';
import { sessionsBenchmark } from './sessions';
import { storageBenchmark } from './storage';

const benchmarks: Record<string, (args: string[]) => Promise<void>> = {
  scale: scaleBenchmark,
  agents: agentsBenchmark,
  latency: dockerBenchmark('latency'),
  throughput: dockerBenchmark('throughput'),
  harbor: harborBenchmark,
  sessions: () => sessionsBenchmark(),
  cloud: cloudBenchmark,
  storage: storageBenchmark,
  chaos: chaosBenchmark,
};

async function main(): Promise<void> {
  const [name = 'scale', ...args] = process.argv.slice(2);
  const run = benchmarks[name];
  if (!run) throw new Error(`unknown benchmark "${name}"; known: ${Object.keys(benchmarks).join(', ')}`);
  await run(args);
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  }
);
