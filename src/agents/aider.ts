import { z } from 'zod';

import { defineAgent, litellmModel } from './builtin';
import { shellQuote } from '../shell';

/** aider (litellm; edits arrive as text in its edit format, not as tool calls), with git, updates and analytics off. */
export default defineAgent({
  name: 'aider',
  description: 'aider (Paul Gauthier)',
  version: '0.86.2',
  source: { registry: 'pypi', package: 'aider-chat', bin: 'aider' },
  wireApi: 'openai-chat-completions',
  verified: true,
  systemPackages: {},
  kwargs: z.strictObject({
    edit_format: z.enum(['whole', 'diff', 'udiff', 'diff-fenced']).optional(),
  }),
  run({ model, kwargs, bin, logsDir }) {
    const flags = ['--yes-always', '--no-stream', '--no-git', '--no-check-update', '--analytics-disable'];
    flags.push('--no-show-model-warnings', '--no-pretty', '--no-fancy-input');
    flags.push(`--llm-history-file=${logsDir}/aider.llm-history.md`, `--chat-history-file=${logsDir}/aider.chat.md`);
    const litellm = litellmModel(model);
    if (litellm !== undefined) flags.push(`--model=${shellQuote(litellm)}`);
    if (kwargs.edit_format) flags.push(`--edit-format=${kwargs.edit_format}`);
    return {
      env: { LITELLM_LOCAL_MODEL_COST_MAP: 'True', AIDER_ANALYTICS: 'false' },
      script: [
        'if [ -n "${OPENAI_BASE_URL:-}" ]; then export OPENAI_API_BASE="$OPENAI_BASE_URL"; fi',
        `${bin} ${flags.join(' ')} --message "$ROLLOUT_TASK_INSTRUCTION" </dev/null > ${logsDir}/aider.txt 2>&1`,
      ].join('\n'),
    };
  },
});
