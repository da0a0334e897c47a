import { z } from 'zod';

import { defineAgent } from './builtin';
import { shellQuote } from '../shell';

/**
 * Kilo Code's CLI (`@kilocode/cli`, an opencode fork; its native binary from the npm platform package) with an
 * OpenAI-compatible provider (Chat Completions) at $OPENAI_BASE_URL, given inline and the only provider enabled, so it
 * fetches no other provider's models. Auto-approves permissions (`--auto`); model lists, self-updates, telemetry,
 * sharing, session upload and codebase indexing are off (they would leave the sandbox). 7.8.1 names platform packages
 * that were never published: 7.7.7 is the newest that installs.
 */
export default defineAgent({
  name: 'kilo',
  description: 'Kilo Code CLI',
  version: '7.7.7',
  source: { registry: 'npm', package: '@kilocode/cli', bin: 'kilo' },
  wireApi: 'openai-chat-completions',
  verified: true,
  // Without ripgrep on PATH, kilo downloads it from GitHub (as opencode).
  systemPackages: { ripgrep: 'rg' },
  kwargs: z.strictObject({
    variant: z.string().min(1).optional(),
  }),
  run({ model, kwargs, bin, logsDir }) {
    const name = model ?? 'default';
    const config = {
      $schema: 'https://app.kilo.ai/config.json',
      enabled_providers: ['rollout'],
      autoupdate: false,
      share: 'disabled',
      provider: {
        rollout: {
          npm: '@ai-sdk/openai-compatible',
          name: 'rollout',
          options: { baseURL: '{env:ROLLOUT_KILO_BASE_URL}', apiKey: '{env:OPENAI_API_KEY}' },
          models: { [name]: {} },
        },
      },
    };
    const flags = [`--model ${shellQuote(`rollout/${name}`)}`, 'run', '--format=json', '--auto'];
    if (kwargs.variant !== undefined) flags.push(`--variant ${shellQuote(kwargs.variant)}`);
    return {
      env: {
        KILO_CONFIG_CONTENT: JSON.stringify(config),
        KILO_DISABLE_MODELS_FETCH: '1',
        KILO_DISABLE_AUTOUPDATE: '1',
        KILO_TELEMETRY_LEVEL: 'off',
        KILO_DISABLE_SHARE: '1',
        KILO_DISABLE_SESSION_INGEST: '1',
        KILO_DISABLE_CODEBASE_INDEXING: '1',
        KILO_DISABLE_LSP_DOWNLOAD: '1',
        KILO_NO_DAEMON: '1',
      },
      script: [
        'export ROLLOUT_KILO_BASE_URL="${OPENAI_BASE_URL:-https://api.openai.com/v1}"',
        `${bin} ${flags.join(' ')} --print-logs --log-level INFO -- "$ROLLOUT_TASK_INSTRUCTION" </dev/null > ${logsDir}/kilo.txt 2> ${logsDir}/kilo.log`,
      ].join('\n'),
    };
  },
});
