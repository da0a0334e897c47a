import { z } from 'zod';

import { defineAgent } from './builtin';
import { shellQuote } from '../shell';

/**
 * Grok CLI (`@vibe-kit/grok-cli`, plain JavaScript on the OpenAI SDK) headless (`--prompt`: every operation
 * auto-approved, the conversation printed as JSON), its endpoint any OpenAI-compatible one: $OPENAI_BASE_URL and
 * $OPENAI_API_KEY passed as GROK_BASE_URL and GROK_API_KEY. It has no telemetry or self-update to switch off.
 */
export default defineAgent({
  name: 'grok-cli',
  description: 'Grok CLI (Vibe Kit)',
  version: '0.0.34',
  source: { registry: 'npm', package: '@vibe-kit/grok-cli', bin: 'grok' },
  wireApi: 'openai-chat-completions',
  verified: true,
  systemPackages: {},
  kwargs: z.strictObject({
    max_tool_rounds: z.number().int().positive().optional(),
  }),
  run({ model, kwargs, bin, logsDir }) {
    const flags = ['--directory "$PWD"'];
    if (model !== undefined) flags.push(`--model ${shellQuote(model)}`);
    if (kwargs.max_tool_rounds !== undefined) flags.push(`--max-tool-rounds ${kwargs.max_tool_rounds}`);
    return {
      env: {},
      script: [
        'export GROK_BASE_URL="${OPENAI_BASE_URL:-https://api.x.ai/v1}"',
        'export GROK_API_KEY="${OPENAI_API_KEY:-}"',
        `${bin} ${flags.join(' ')} --prompt "$ROLLOUT_TASK_INSTRUCTION" </dev/null > ${logsDir}/grok-cli.txt 2>&1`,
      ].join('\n'),
    };
  },
});
