/** `rollout codec-server --port N`: decodes (and encodes) Rollout's encrypted payloads for the Temporal UI. */
import type { Command } from 'commander';
import { InvalidArgumentError } from 'commander';

import { createCodecServer } from '../temporal/codec-server';
import { TemporalConfigError } from '../temporal/envconfig';
import { PAYLOAD_KEY_ENV, payloadCodecFromEnv } from '../temporal/payload-codec';

function port(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n <= 0 || n > 65535) throw new InvalidArgumentError('expected a port number');
  return n;
}

/** The dev server's UI, and TEMPORAL_UI_URL's origin when set. */
function defaultOrigins(): string[] {
  const origins = ['http://localhost:8233', 'http://127.0.0.1:8233'];
  if (process.env.TEMPORAL_UI_URL) origins.push(new URL(process.env.TEMPORAL_UI_URL).origin);
  return origins;
}

export function addCodecServerCommand(program: Command): void {
  program
    .command('codec-server')
    .description(
      `Temporal's codec-server protocol (POST /encode, /decode) with the key of ${PAYLOAD_KEY_ENV}, so the Temporal ` +
        'UI shows encrypted payloads to people who hold it (docs/production.md)'
    )
    .requiredOption('--port <n>', 'port to listen on', port)
    .option('--host <host>', 'address to listen on', '127.0.0.1')
    .option(
      '--origin <url...>',
      'browser origins allowed (the Temporal UI; `*` any) (default: the dev server UI, TEMPORAL_UI_URL)'
    )
    .action(async (opts: { port: number; host: string; origin?: string[] }) => {
      const codec = payloadCodecFromEnv();
      if (!codec) throw new TemporalConfigError(`${PAYLOAD_KEY_ENV} is not set: the codec server has no key`);
      const server = createCodecServer({ codec, origins: opts.origin ?? defaultOrigins() });
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen(opts.port, opts.host, resolve);
      });
      console.log(`rollout codec-server: http://${opts.host}:${opts.port} (Ctrl-C stops)`);
      await new Promise<void>((resolve) => {
        process.once('SIGINT', resolve);
        process.once('SIGTERM', resolve);
      });
      await new Promise((resolve) => server.close(resolve));
    });
}
