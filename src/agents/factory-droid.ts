import { z } from 'zod';

import { defineAgent } from './builtin';
import { shellQuote } from '../shell';

/**
 * Factory's Droid CLI (`droid exec`, its native binary from the npm platform package) with a bring-your-own-key
 * custom model (`generic-chat-completion-api`: OpenAI Chat Completions) at $OPENAI_BASE_URL, the key read from
 * $OPENAI_API_KEY by the settings file's `${OPENAI_API_KEY}` reference; no Factory login. Airgap mode keeps it from
 * Factory's services (organisation settings, feature flags, cloud session sync, telemetry); self-updates are off; its
 * home is a folder of its own (FACTORY_HOME_OVERRIDE). @factory/cli 0.225.1 names platform packages of its own
 * version that were never published: the 0.225.2 binary is installed beside it.
 */
export default defineAgent({
  name: 'factory-droid',
  description: "Factory's Droid CLI",
  version: '0.225.1',
  source: {
    registry: 'npm',
    package: '@factory/cli',
    bin: 'droid',
    extraPackages: ['@factory/cli-linux-x64@0.225.2'],
  },
  wireApi: 'openai-chat-completions',
  verified: true,
  // Without ps, the commands of its Execute tool die by SIGKILL in most runs.
  systemPackages: { procps: 'ps' },
  kwargs: z.strictObject({
    reasoning_effort: z.string().min(1).optional(),
  }),
  run({ model, kwargs, bin, logsDir }) {
    const name = model ?? 'default';
    const flags = [
      'exec',
      '--skip-permissions-unsafe',
      '--output-format stream-json',
      `--model ${shellQuote(`custom:${name}`)}`,
    ];
    if (kwargs.reasoning_effort !== undefined) flags.push(`--reasoning-effort ${shellQuote(kwargs.reasoning_effort)}`);
    const head = `{"cloudSessionSync":false,"autoUpdateEnabled":false,"customModels":[{"model":${JSON.stringify(name)},"displayName":${JSON.stringify(name)},"provider":"generic-chat-completion-api","apiKey":"\${OPENAI_API_KEY}","baseUrl":`;
    return {
      env: {
        FACTORY_HOME_OVERRIDE: '/tmp/rollout-droid',
        FACTORY_AIRGAP_ENABLED: '1',
        FACTORY_DROID_AUTO_UPDATE_ENABLED: 'false',
        FACTORY_OTEL_ENABLED: 'false',
      },
      script: [
        "url=$(printf '%s' \"${OPENAI_BASE_URL:-https://api.openai.com/v1}\" | sed 's/[\\\\\"]/\\\\&/g')",
        'mkdir -p "$FACTORY_HOME_OVERRIDE/.factory"',
        `printf '%s"%s"}]}\\n' ${shellQuote(head)} "$url" > "$FACTORY_HOME_OVERRIDE/.factory/settings.json"`,
        `status=0; ${bin} ${flags.join(' ')} "$ROLLOUT_TASK_INSTRUCTION" </dev/null > ${logsDir}/factory-droid.txt 2>&1 || status=$?`,
        `cp -r "$FACTORY_HOME_OVERRIDE/.factory/sessions" ${logsDir}/factory-droid-sessions 2>/dev/null || true`,
        `cp -r "$FACTORY_HOME_OVERRIDE/.factory/logs" ${logsDir}/factory-droid-logs 2>/dev/null || true`,
        'exit $status',
      ].join('\n'),
    };
  },
});
