import { z } from 'zod';

import { defineAgent } from './builtin';
import { shellQuote } from '../shell';

/**
 * gptme (PyPI) non-interactive (`-n`: no confirmations; it ends when the model calls its `complete` tool, or after
 * two replies without a tool), with native tool calls (`--tool-format tool`) and its `local` provider: an
 * OpenAI-compatible endpoint (Chat Completions) at $OPENAI_BASE_URL with $OPENAI_API_KEY. Its config and logs live in
 * folders of its own (XDG_CONFIG_HOME, XDG_DATA_HOME); tiktoken is skipped (it would download its encoding from
 * OpenAI's blob store), so token counts in its own display are estimates. It has no telemetry unless configured.
 */
export default defineAgent({
  name: 'gptme',
  description: 'gptme',
  version: '0.35.1',
  source: { registry: 'pypi', package: 'gptme', bin: 'gptme' },
  wireApi: 'openai-chat-completions',
  verified: true,
  systemPackages: {},
  kwargs: z.strictObject({
    max_steps: z.number().int().positive().optional(),
  }),
  run({ model, kwargs, bin, logsDir }) {
    const flags = ['-n', '--tool-format tool', `--model ${shellQuote(`local/${model ?? 'default'}`)}`];
    return {
      env: {
        XDG_CONFIG_HOME: '/tmp/rollout-gptme/config',
        XDG_DATA_HOME: '/tmp/rollout-gptme/data',
        GPTME_TIKTOKEN_TIMEOUT: '0',
        ...(kwargs.max_steps !== undefined ? { GPTME_MAX_STEPS: String(kwargs.max_steps) } : {}),
      },
      script: [
        `status=0; ${bin} ${flags.join(' ')} "$ROLLOUT_TASK_INSTRUCTION" </dev/null > ${logsDir}/gptme.txt 2>&1 || status=$?`,
        `cp -r "$XDG_DATA_HOME/gptme/logs" ${logsDir}/gptme-logs 2>/dev/null || true`,
        'exit $status',
      ].join('\n'),
    };
  },
});
