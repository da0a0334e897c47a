/**
 * `npm run stand-in -- <modal|daytona|e2b|fly> [--faults rate=0.2]`: starts one vendor's stand-in (test/environments/<vendor>/<vendor>-stand-in.ts),
 * prints `export NAME=value` lines that point the vendor's SDK and Rollout's credentials check at it (eval them, or
 * paste them, in the shell that runs `rollout`), and runs until stopped: SIGINT or SIGTERM removes its sandboxes
 * (containers) and images. Not the vendor: see docs/environments.md.
 */
import type { CloudStandIn, CloudVendor } from './cloud-stand-in';
import { startDaytonaStandIn } from '../environments/daytona/daytona-stand-in';
import { startE2BStandIn } from '../environments/e2b/e2b-stand-in';
import { startFlyStandIn } from '../environments/fly/fly-stand-in';
import { startModalStandIn } from '../environments/modal/modal-stand-in';
import { parseFaults } from './stand-in-faults';

/** Each vendor's stand-in: one line each. */
const STAND_INS: Record<CloudVendor, () => Promise<CloudStandIn>> = {
  daytona: startDaytonaStandIn,
  e2b: startE2BStandIn,
  fly: startFlyStandIn,
  modal: () => startModalStandIn(),
};

export function standInStarter(vendor: string): () => Promise<CloudStandIn> {
  const start = Object.hasOwn(STAND_INS, vendor) ? STAND_INS[vendor as CloudVendor] : undefined;
  if (!start) throw new Error(`no stand-in for "${vendor}": expected one of ${Object.keys(STAND_INS).join(', ')}`);
  return start;
}

/** Quoted for a POSIX shell's `export`. */
function shellValue(value: string): string {
  return /^[\w@%+=:,./-]*$/.test(value) ? value : `'${value.replace(/'/g, `'\\''`)}'`;
}

/** `<vendor> [--faults rate=<0..1>]`. */
function parseArgs(args: string[]): { vendor: string; faults: { rate: number } | null } {
  const [vendor = '', ...rest] = args;
  let faults: { rate: number } | null = null;
  for (let i = 0; i < rest.length; i++) {
    const arg = rest[i]!;
    if (arg === '--faults') faults = parseFaults(rest[++i] ?? '');
    else if (arg.startsWith('--faults=')) faults = parseFaults(arg.slice('--faults='.length));
    else throw new Error(`unknown argument "${arg}" (expected --faults rate=<0..1>)`);
  }
  return { vendor, faults };
}

async function main(): Promise<void> {
  let start: () => Promise<CloudStandIn>;
  let vendor: string;
  let faults: { rate: number } | null;
  try {
    ({ vendor, faults } = parseArgs(process.argv.slice(2)));
    start = standInStarter(vendor);
  } catch (err) {
    console.error(`stand-in: ${(err as Error).message}`);
    process.exit(2);
  }
  // Signals are taken from the start: one during start-up stops the stand-in once it is up (nothing left behind).
  let standIn: CloudStandIn | null = null;
  let stopping: NodeJS.Signals | null = null;
  const stop = () => {
    console.error(`stand-in: ${stopping}: removing its sandboxes and images`);
    standIn!.stop().then(
      () => process.exit(0),
      (err: unknown) => {
        console.error(`stand-in: clean-up failed: ${(err as Error).message}`);
        process.exit(1);
      }
    );
  };
  const onSignal = (signal: NodeJS.Signals) => {
    if (stopping) return;
    stopping = signal;
    if (standIn) stop();
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  standIn = await start();
  if (stopping) return stop();
  if (faults) standIn.setFaults(faults);
  for (const [name, value] of Object.entries(standIn.env)) console.log(`export ${name}=${shellValue(value)}`);
  const faulty = faults ? `; ${faults.rate * 100}% of API calls answered with ${vendor}'s rate-limit reply` : '';
  console.error(
    `stand-in: ${vendor} stand-in running (its sandboxes are local Docker containers${faulty}); Ctrl-C stops it`
  );
}

if (require.main === module) {
  main().catch((err: unknown) => {
    console.error(`stand-in: ${(err as Error).stack ?? String(err)}`);
    process.exit(1);
  });
}
