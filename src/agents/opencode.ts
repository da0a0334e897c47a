import { z } from 'zod';

import { defineAgent } from './builtin';
import { shellQuote } from '../shell';

/**
 * opencode with an OpenAI-compatible provider (Chat Completions) at $OPENAI_BASE_URL, given inline so no config file
 * is left behind; models.dev and update checks are off (they would leave the sandbox).
 */
export default defineAgent({
  name: 'opencode',
  description: 'opencode (sst)',
  version: '1.18.33',
  source: { registry: 'npm', package: 'opencode-ai', bin: 'opencode' },
  wireApi: 'openai-chat-completions',
  verified: true,
  // Without ripgrep on PATH, opencode downloads it from GitHub.
  systemPackages: { ripgrep: 'rg' },
  kwargs: z.strictObject({}),
  run({ model, bin, logsDir }) {
    const name = model ?? 'default';
    const config = {
      $schema: 'https://opencode.ai/config.json',
      provider: {
        rollout: {
          npm: '@ai-sdk/openai-compatible',
          name: 'rollout',
          options: { baseURL: '{env:ROLLOUT_OPENCODE_BASE_URL}', apiKey: '{env:OPENAI_API_KEY}' },
          models: { [name]: {} },
        },
      },
    };
    return {
      env: {
        OPENCODE_CONFIG_CONTENT: JSON.stringify(config),
        OPENCODE_DISABLE_MODELS_FETCH: 'true',
        OPENCODE_DISABLE_AUTOUPDATE: 'true',
      },
      script: [
        'export ROLLOUT_OPENCODE_BASE_URL="${OPENAI_BASE_URL:-https://api.openai.com/v1}"',
        // Its own log goes to opencode.log: runs that hang (upstream: anomalyco/opencode#35870, #36763) then show where.
        `${bin} --model ${shellQuote(`rollout/${name}`)} run --format=json --dangerously-skip-permissions --print-logs --log-level INFO -- "$ROLLOUT_TASK_INSTRUCTION" </dev/null > ${logsDir}/opencode.txt 2> ${logsDir}/opencode.log`,
      ].join('\n'),
    };
  },
});
