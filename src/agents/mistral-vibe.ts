import { z } from 'zod';

import { defineAgent } from './builtin';
import { shellQuote } from '../shell';

/**
 * Mistral's Vibe CLI (PyPI `mistral-vibe`, Python >= 3.12: Debian trixie's python3.13 on bookworm images) headless
 * (`-p`, every tool call approved, the working directory trusted for this run only), its model a `generic`
 * (OpenAI-compatible, Chat Completions) provider at $OPENAI_BASE_URL whose key it reads from $OPENAI_API_KEY. Its home
 * is a folder of its own (VIBE_HOME) with update checks, telemetry and notifications off; `--output-dir` keeps its
 * export (usage, outcome) and session journal in the logs. 3.0.3 pins a certifi release PyPI no longer serves.
 */
export default defineAgent({
  name: 'mistral-vibe',
  description: "Mistral's Vibe CLI",
  version: '3.0.2',
  source: { registry: 'pypi', package: 'mistral-vibe', bin: 'vibe', minPython: [3, 12] },
  wireApi: 'openai-chat-completions',
  verified: true,
  systemPackages: {},
  kwargs: z.strictObject({
    max_turns: z.number().int().positive().optional(),
  }),
  run({ model, kwargs, bin, logsDir }) {
    const name = model ?? 'default';
    const flags = ['--auto-approve', '--trust', `--output-dir ${logsDir}/mistral-vibe`];
    if (kwargs.max_turns !== undefined) flags.push(`--max-turns ${kwargs.max_turns}`);
    const head = [
      `active_model = ${JSON.stringify(name)}`,
      'enable_update_checks = false',
      'enable_telemetry = false',
      'enable_notifications = false',
      '[[providers]]',
      'name = "rollout"',
      'api_key_env_var = "OPENAI_API_KEY"',
      'backend = "generic"',
    ].join('\n');
    const models = [
      '[[models]]',
      `name = ${JSON.stringify(name)}`,
      'provider = "rollout"',
      `alias = ${JSON.stringify(name)}`,
    ];
    return {
      env: { VIBE_HOME: '/tmp/rollout-vibe' },
      script: [
        // TOML basic strings escape backslashes and quotes as JSON does.
        "url=$(printf '%s' \"${OPENAI_BASE_URL:-https://api.openai.com/v1}\" | sed 's/[\\\\\"]/\\\\&/g')",
        'mkdir -p "$VIBE_HOME"',
        `printf '%s\\n' ${shellQuote(head)} "api_base = \\"$url\\"" ${shellQuote(models.join('\n'))} > "$VIBE_HOME/config.toml"`,
        `status=0; ${bin} ${flags.join(' ')} -p "$ROLLOUT_TASK_INSTRUCTION" </dev/null > ${logsDir}/mistral-vibe.txt 2>&1 || status=$?`,
        `cp -r "$VIBE_HOME/logs" ${logsDir}/mistral-vibe-logs 2>/dev/null || true`,
        'exit $status',
      ].join('\n'),
    };
  },
});
