import { z } from 'zod';

import { defineAgent } from './builtin';
import { shellQuote } from '../shell';

/**
 * Cline's CLI (`cline --json --yolo`, its native binary from the npm platform package) with its OpenAI-compatible
 * provider at $OPENAI_BASE_URL. Its state lives in a data dir of its own (--data-dir: sandbox mode) outside /logs,
 * seeded with the provider and with telemetry and self-updates off; the session files are copied into the logs.
 * Yolo mode ends a run only when the model calls its submit_and_exit tool.
 */
export default defineAgent({
  name: 'cline',
  description: "Cline's CLI",
  version: '3.0.65',
  source: { registry: 'npm', package: 'cline', bin: 'cline' },
  wireApi: 'openai-chat-completions',
  verified: true,
  systemPackages: {},
  kwargs: z.strictObject({
    thinking: z.enum(['none', 'low', 'medium', 'high', 'xhigh']).optional(),
    retries: z.number().int().positive().optional(),
  }),
  run({ model, kwargs, bin, logsDir }) {
    // Provider and model come from providers.json: --provider or --model would reset its base URL and key.
    const flags = ['--json', '--yolo', '--data-dir "$CLINE_DATA"'];
    if (kwargs.thinking) flags.push(`--thinking ${kwargs.thinking}`);
    if (kwargs.retries !== undefined) flags.push(`--retries ${kwargs.retries}`);
    const settings = { telemetryOptOut: true, autoUpdateEnabled: false };
    // The key is the gateway's per-trial token when the gateway is on (the default): the real key is never here.
    const providers = `{"version":1,"lastUsedProvider":"openai-compatible","modes":{},"providers":{"openai-compatible":{"settings":{"provider":"openai-compatible","apiKey":$KEY,"baseUrl":$URL${model === undefined ? '' : `,"model":${JSON.stringify(model)}`}},"updatedAt":"2026-01-01T00:00:00.000Z","tokenSource":"manual"}}}`;
    return {
      env: { CLINE_NO_AUTO_UPDATE: '1', DISABLE_TELEMETRY: '1', CLINE_DATA: '/tmp/rollout-cline-data' },
      script: [
        'json() { node -e \'process.stdout.write(JSON.stringify(process.argv[1]))\' "$1"; }',
        'KEY=$(json "${OPENAI_API_KEY:-}"); URL=$(json "${OPENAI_BASE_URL:-https://api.openai.com/v1}")',
        'mkdir -p "$CLINE_DATA/settings"',
        `printf '%s' ${shellQuote(JSON.stringify(settings))} > "$CLINE_DATA/settings/global-settings.json"`,
        `(umask 077; cat > "$CLINE_DATA/settings/providers.json" <<JSON\n${providers}\nJSON\n)`,
        `status=0; ${bin} ${flags.join(' ')} -- "$ROLLOUT_TASK_INSTRUCTION" </dev/null > ${logsDir}/cline.txt 2>&1 || status=$?`,
        `cp -r "$CLINE_DATA/sessions" ${logsDir}/cline-sessions 2>/dev/null || true`,
        `cp "$CLINE_DATA/logs/cline.log" ${logsDir}/cline.log 2>/dev/null || true`,
        'exit $status',
      ].join('\n'),
    };
  },
});
