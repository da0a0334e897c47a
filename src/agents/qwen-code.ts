import { z } from 'zod';

import { defineAgent } from './builtin';
import { shellQuote } from '../shell';

/** Qwen Code (a Gemini CLI fork) on its OpenAI auth type: Chat Completions to $OPENAI_BASE_URL. */
export default defineAgent({
  name: 'qwen-code',
  description: "Alibaba's Qwen Code CLI",
  version: '0.24.4',
  source: { registry: 'npm', package: '@qwen-code/qwen-code', bin: 'qwen' },
  wireApi: 'openai-chat-completions',
  verified: true,
  systemPackages: {},
  kwargs: z.strictObject({}),
  run({ model, bin, logsDir }) {
    const modelFlag = model === undefined ? '' : ` --model ${shellQuote(model)}`;
    return {
      env: modelEnv(model),
      script: [
        // Its usage statistics go to a vendor endpoint (unreachable in a sandbox, and slow to give up on).
        'mkdir -p "$HOME/.qwen"',
        `printf '%s' ${shellQuote(JSON.stringify(QWEN_SETTINGS))} > "$HOME/.qwen/settings.json"`,
        `status=0; ${bin} --yolo --auth-type openai${modelFlag} --prompt "$ROLLOUT_TASK_INSTRUCTION" </dev/null > ${logsDir}/qwen-code.txt 2>&1 || status=$?`,
        `cp -r "$HOME/.qwen/projects" ${logsDir}/qwen-sessions 2>/dev/null || true`,
        'exit $status',
      ].join('\n'),
    };
  },
});

const QWEN_SETTINGS = { privacy: { usageStatisticsEnabled: false }, telemetry: { enabled: false } };

function modelEnv(model: string | undefined): Record<string, string> {
  return model === undefined ? {} : { OPENAI_MODEL: model };
}
