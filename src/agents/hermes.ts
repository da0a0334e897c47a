import { z } from 'zod';

import { defineAgent } from './builtin';
import { shellQuote } from '../shell';

/**
 * Nous Research's Hermes Agent (PyPI `hermes-agent`) for one query (`chat -q … -Q`, dangerous-command prompts off
 * with `--yolo`), its model a named custom provider (OpenAI-compatible, Chat Completions) at $OPENAI_BASE_URL whose
 * key it reads from $OPENAI_API_KEY (`key_env`). Its home is a folder of its own (HERMES_HOME). The context length is
 * given, so it asks no model catalogue (OpenRouter's) for it; the tirith command scanner is off (it would download its
 * binary from GitHub), and so are lazy installs (it would pip-install optional packages, e.g. edge-tts, at run time).
 * A pip install has no self-update.
 */
export default defineAgent({
  name: 'hermes',
  description: "Nous Research's Hermes Agent",
  version: '0.19.0',
  source: { registry: 'pypi', package: 'hermes-agent', bin: 'hermes' },
  wireApi: 'openai-chat-completions',
  verified: true,
  systemPackages: {},
  kwargs: z.strictObject({
    max_turns: z.number().int().positive().optional(),
    context_length: z.number().int().positive().optional(),
  }),
  run({ model, kwargs, bin, logsDir }) {
    const name = model ?? 'default';
    const flags = ['--yolo', 'chat', '-Q'];
    if (kwargs.max_turns !== undefined) flags.push(`--max-turns ${kwargs.max_turns}`);
    // JSON is YAML; the base URL is spliced in at run time (it comes from the environment).
    const modelSettings = { provider: 'rollout', default: name, context_length: kwargs.context_length ?? 131072 };
    const security = { tirith_enabled: false, allow_lazy_installs: false };
    const head = `{"model":${JSON.stringify(modelSettings)},"security":${JSON.stringify(security)},"custom_providers":[{"name":"rollout","key_env":"OPENAI_API_KEY","model":${JSON.stringify(name)},"base_url":`;
    return {
      env: { HERMES_HOME: '/tmp/rollout-hermes' },
      script: [
        // YAML double-quoted strings escape backslashes and quotes as JSON does.
        "url=$(printf '%s' \"${OPENAI_BASE_URL:-https://api.openai.com/v1}\" | sed 's/[\\\\\"]/\\\\&/g')",
        'mkdir -p "$HERMES_HOME"',
        `printf '%s"%s"}]}\\n' ${shellQuote(head)} "$url" > "$HERMES_HOME/config.yaml"`,
        `status=0; ${bin} ${flags.join(' ')} -q "$ROLLOUT_TASK_INSTRUCTION" </dev/null > ${logsDir}/hermes.txt 2>&1 || status=$?`,
        `cp -r "$HERMES_HOME/sessions" ${logsDir}/hermes-sessions 2>/dev/null || true`,
        `cp -r "$HERMES_HOME/logs" ${logsDir}/hermes-logs 2>/dev/null || true`,
        'exit $status',
      ].join('\n'),
    };
  },
});
