import { z } from 'zod';

import { defineAgent } from './builtin';

/**
 * Moonshot's Kimi Code CLI (`@moonshot-ai/kimi-code`, the successor of the archived Python kimi-cli), one prompt
 * non-interactively (prompt mode decides without asking), its model given entirely by KIMI_MODEL_* variables: an OpenAI-compatible
 * provider at $OPENAI_BASE_URL. Telemetry and self-updates are off.
 */
export default defineAgent({
  name: 'kimi',
  description: "Moonshot's Kimi Code CLI",
  version: '2.1.0',
  source: { registry: 'npm', package: '@moonshot-ai/kimi-code', bin: 'kimi' },
  wireApi: 'openai-chat-completions',
  verified: true,
  systemPackages: {},
  kwargs: z.strictObject({
    max_context_size: z.number().int().positive().optional(),
  }),
  run({ model, kwargs, bin, logsDir }) {
    return {
      env: {
        KIMI_MODEL_PROVIDER_TYPE: 'openai',
        KIMI_MODEL_NAME: model ?? 'default',
        ...(kwargs.max_context_size ? { KIMI_MODEL_MAX_CONTEXT_SIZE: String(kwargs.max_context_size) } : {}),
        KIMI_CODE_HOME: '/tmp/rollout-kimi-home',
        KIMI_DISABLE_TELEMETRY: 'true',
        KIMI_CODE_NO_AUTO_UPDATE: 'true',
      },
      script: [
        'export KIMI_MODEL_BASE_URL="${OPENAI_BASE_URL:-https://api.openai.com/v1}"',
        'export KIMI_MODEL_API_KEY="${OPENAI_API_KEY:-}"',
        `status=0; ${bin} --prompt "$ROLLOUT_TASK_INSTRUCTION" --output-format stream-json </dev/null > ${logsDir}/kimi.txt 2>&1 || status=$?`,
        `cp -r "$KIMI_CODE_HOME/sessions" ${logsDir}/kimi-sessions 2>/dev/null || true`,
        'exit $status',
      ].join('\n'),
    };
  },
});
