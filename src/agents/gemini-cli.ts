import { z } from 'zod';

import { defineAgent } from './builtin';
import { shellQuote } from '../shell';

/**
 * Google's Gemini CLI in yolo mode. With a custom base URL it cannot detect its auth type, so settings.json pins the
 * API-key type; the workspace is trusted up front (otherwise it exits 55 or drops yolo).
 */
export default defineAgent({
  name: 'gemini-cli',
  description: "Google's Gemini CLI",
  version: '0.61.0',
  source: { registry: 'npm', package: '@google/gemini-cli', bin: 'gemini' },
  wireApi: 'gemini',
  verified: true,
  systemPackages: {},
  kwargs: z.strictObject({}),
  run({ model, bin, logsDir }) {
    const settings = {
      security: { auth: { selectedType: 'gemini-api-key' } },
      telemetry: { enabled: false },
      privacy: { usageStatisticsEnabled: false },
    };
    const modelFlag = model === undefined ? '' : ` --model ${shellQuote(model)}`;
    return {
      env: { GEMINI_CLI_TRUST_WORKSPACE: 'true' },
      script: [
        'mkdir -p "$HOME/.gemini"',
        `printf '%s' ${shellQuote(JSON.stringify(settings))} > "$HOME/.gemini/settings.json"`,
        `status=0; ${bin} --yolo${modelFlag} --prompt "$ROLLOUT_TASK_INSTRUCTION" </dev/null > ${logsDir}/gemini-cli.txt 2>&1 || status=$?`,
        `cp -r "$HOME/.gemini/tmp" ${logsDir}/gemini-sessions 2>/dev/null || true`,
        'exit $status',
      ].join('\n'),
    };
  },
});
