/**
 * `npm run stand-in -- <modal|daytona|e2b|fly> [--faults rate=0.2] [--latency <ms>]`: starts one vendor's stand-in
 * (test/environments/<vendor>/<vendor>-stand-in.ts),
 * prints `export NAME=value` lines that point the vendor's SDK and Rollout's credentials check at it (eval them, or
 * paste them, in the shell that runs `rollout`), and runs until stopped: SIGINT or SIGTERM removes its sandboxes
 * (containers) and images. Not the vendor: see docs/environments.md.
 */
import type { CloudStandIn, CloudVendor } from './cloud-stand-in';
import { startDaytonaStandIn } from '../environments/daytona/daytona-stand-in';
import { startE2BStandIn } from '../environments/e2b/e2b-stand-in';
import { startFlyStandIn } from '../environments/fly/fly-stand-in';
import { startModalStandIn } from '../environments/modal/modal-stand-in';
import { delayedEnv } from './latency-proxy';
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

interface StandInArgs {
  vendor: string;
  faults: { rate: number } | null;
  /** Every API call delayed this long (test/support/latency-proxy.ts); 0: none. */
  latencyMs: number;
}

/** `<vendor> [--faults rate=<0..1>] [--latency <ms>]`. */
function parseArgs(args: string[]): StandInArgs {
  const [vendor = '', ...rest] = args;
  let faults: { rate: number } | null = null;
  let latencyMs = 0;
  for (let i = 0; i < rest.length; i++) {
    const arg = rest[i]!;
    const [flag, inline] = arg.startsWith('--') && arg.includes('=') ? arg.split(/=(.*)/s) : [arg, undefined];
    const value = () => inline ?? rest[++i] ?? '';
    if (flag === '--faults') faults = parseFaults(value());
    else if (flag === '--latency') latencyMs = parseLatency(value());
    else throw new Error(`unknown argument "${arg}" (expected --faults rate=<0..1> or --latency <ms>)`);
  }
  return { vendor, faults, latencyMs };
}

function parseLatency(text: string): number {
  const ms = Number(text);
  if (text.trim() === '' || !Number.isInteger(ms) || ms < 0 || ms > 60_000) {
    throw new Error(`--latency: expected whole milliseconds from 0 to 60000, got "${text}"`);
  }
  return ms;
}

async function main(): Promise<void> {
  let start: () => Promise<CloudStandIn>;
  let vendor: string;
  let faults: { rate: number } | null;
  let latencyMs: number;
  try {
    ({ vendor, faults, latencyMs } = parseArgs(process.argv.slice(2)));
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
  const env = latencyMs > 0 ? (await delayedEnv(standIn.env, latencyMs)).env : standIn.env;
  for (const [name, value] of Object.entries(env)) console.log(`export ${name}=${shellValue(value)}`);
  const delayed = latencyMs > 0 ? `; every API call delayed ${latencyMs} ms` : '';
  const faulty =
    (faults ? `; ${faults.rate * 100}% of API calls answered with ${vendor}'s rate-limit reply` : '') + delayed;
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
