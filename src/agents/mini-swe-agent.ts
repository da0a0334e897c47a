import { z } from 'zod';

import { defineAgent, litellmModel } from './builtin';
import { shellQuote } from '../shell';

/**
 * mini-swe-agent (litellm, one `bash` tool; it finishes when a command prints COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT).
 * litellm 1.106 fails every call without `mcp` installed, and fetches its cost map from GitHub unless told not to.
 */
export default defineAgent({
  name: 'mini-swe-agent',
  description: 'mini-swe-agent (SWE-agent team)',
  version: '2.4.6',
  source: { registry: 'pypi', package: 'mini-swe-agent', bin: 'mini-swe-agent', extraPackages: ['mcp'] },
  wireApi: 'openai-chat-completions',
  verified: true,
  probeArgs: '--help',
  systemPackages: {},
  kwargs: z.strictObject({
    cost_limit: z.number().nonnegative().optional(),
  }),
  run({ model, kwargs, bin, logsDir }) {
    const flags = ['--yolo', '--exit-immediately', `--output=${logsDir}/mini-swe-agent.trajectory.json`];
    const litellm = litellmModel(model);
    if (litellm !== undefined) flags.push(`--model=${shellQuote(litellm)}`);
    if (kwargs.cost_limit !== undefined) flags.push(`--cost-limit=${kwargs.cost_limit}`);
    return {
      env: {
        MSWEA_CONFIGURED: 'true',
        MSWEA_COST_TRACKING: 'ignore_errors',
        LITELLM_LOCAL_MODEL_COST_MAP: 'True',
      },
      script: [
        'if [ -n "${OPENAI_BASE_URL:-}" ]; then export OPENAI_API_BASE="$OPENAI_BASE_URL"; fi',
        `${bin} ${flags.join(' ')} --task "$ROLLOUT_TASK_INSTRUCTION" </dev/null > ${logsDir}/mini-swe-agent.txt 2>&1`,
      ].join('\n'),
    };
  },
});
