import { z } from 'zod';

import { defineAgent } from './builtin';

/**
 * GitHub's Copilot CLI in its bring-your-own-key mode: an OpenAI-compatible provider at $OPENAI_BASE_URL, offline
 * (no GitHub sign-in, no calls to GitHub's services), every tool allowed.
 */
export default defineAgent({
  name: 'copilot-cli',
  description: "GitHub's Copilot CLI (bring your own key)",
  version: '1.0.102',
  source: { registry: 'npm', package: '@github/copilot', bin: 'copilot' },
  wireApi: 'openai-chat-completions',
  verified: true,
  systemPackages: {},
  kwargs: z.strictObject({}),
  run({ model, bin, logsDir }) {
    return {
      env: {
        COPILOT_PROVIDER_TYPE: 'openai',
        COPILOT_OFFLINE: 'true',
        ...(model === undefined ? {} : { COPILOT_MODEL: model }),
      },
      script: [
        'export COPILOT_PROVIDER_BASE_URL="${OPENAI_BASE_URL:-https://api.openai.com/v1}"',
        'export COPILOT_PROVIDER_API_KEY="${OPENAI_API_KEY:-}"',
        `${bin} --prompt "$ROLLOUT_TASK_INSTRUCTION" --yolo --output-format=json </dev/null > ${logsDir}/copilot-cli.txt 2>&1`,
      ].join('\n'),
    };
  },
});
