import { z } from 'zod';

import { defineAgent } from './builtin';
import { shellQuote } from '../shell';

/**
 * OpenAI's Codex CLI (`codex exec`). It speaks only the Responses API, and takes its base URL from config.toml, not
 * the environment: the run writes a provider from $OPENAI_BASE_URL into a CODEX_HOME outside /logs (it holds no key:
 * the provider reads OPENAI_API_KEY from the environment).
 */
export default defineAgent({
  name: 'codex',
  description: "OpenAI's Codex CLI",
  version: '0.169.0',
  source: { registry: 'npm', package: '@openai/codex', bin: 'codex' },
  wireApi: 'openai-responses',
  verified: true,
  systemPackages: {},
  kwargs: z.strictObject({
    reasoning_effort: z.enum(['minimal', 'low', 'medium', 'high']).optional(),
  }),
  run({ model, kwargs, bin, logsDir }) {
    const flags = ['--json', '--dangerously-bypass-approvals-and-sandbox', '--skip-git-repo-check'];
    if (model !== undefined) flags.push(`--model ${shellQuote(model)}`);
    if (kwargs.reasoning_effort) flags.push(`-c model_reasoning_effort=${kwargs.reasoning_effort}`);
    const config = [
      ...(model === undefined ? [] : [`model = ${JSON.stringify(model)}`]),
      'model_provider = "rollout"',
      '[model_providers.rollout]',
      'name = "rollout"',
      'base_url = "$BASE_URL"',
      'env_key = "OPENAI_API_KEY"',
      'wire_api = "responses"',
      'supports_websockets = false',
    ].join('\n');
    return {
      env: { CODEX_HOME: '/tmp/rollout-codex-home' },
      script: [
        'BASE_URL="${OPENAI_BASE_URL:-https://api.openai.com/v1}"',
        'mkdir -p "$CODEX_HOME"',
        `cat > "$CODEX_HOME/config.toml" <<TOML\n${config}\nTOML`,
        `status=0; ${bin} exec ${flags.join(' ')} -- "$ROLLOUT_TASK_INSTRUCTION" </dev/null > ${logsDir}/codex.txt 2>&1 || status=$?`,
        `cp -r "$CODEX_HOME/sessions" ${logsDir}/codex-sessions 2>/dev/null || true`,
        'exit $status',
      ].join('\n'),
    };
  },
});
