import { z } from 'zod';

import { defineAgent } from './builtin';
import { shellQuote } from '../shell';

/**
 * pi (Mario Zechner's coding agent), headless (`--print --mode json`), with an OpenAI-compatible provider at
 * $OPENAI_BASE_URL written into its models.json (outside /logs; the key is read from OPENAI_API_KEY by name).
 * Offline mode stops its update checks and install telemetry.
 */
export default defineAgent({
  name: 'pi',
  description: "pi coding agent (Mario Zechner's)",
  version: '0.73.1',
  source: { registry: 'npm', package: '@mariozechner/pi-coding-agent', bin: 'pi' },
  wireApi: 'openai-chat-completions',
  verified: true,
  systemPackages: {},
  kwargs: z.strictObject({
    thinking: z.enum(['off', 'minimal', 'low', 'medium', 'high', 'xhigh']).optional(),
  }),
  run({ model, kwargs, bin, logsDir }) {
    const id = model ?? 'default';
    const models = {
      providers: {
        rollout: {
          baseUrl: '$BASE_URL',
          api: 'openai-completions',
          apiKey: 'OPENAI_API_KEY',
          // Servers other than OpenAI's (vLLM, gateways) may take neither the developer role nor reasoning_effort.
          compat: { supportsDeveloperRole: false, supportsReasoningEffort: false },
          models: [{ id }],
        },
      },
    };
    const flags = ['--print', '--mode json', '--offline', '--no-session', '--provider rollout'];
    flags.push(`--model ${shellQuote(id)}`);
    if (kwargs.thinking) flags.push(`--thinking ${kwargs.thinking}`);
    return {
      env: { PI_CODING_AGENT_DIR: '/tmp/rollout-pi-agent', PI_OFFLINE: '1', PI_TELEMETRY: '0' },
      script: [
        'BASE_URL="${OPENAI_BASE_URL:-https://api.openai.com/v1}"',
        'mkdir -p "$PI_CODING_AGENT_DIR"',
        `cat > "$PI_CODING_AGENT_DIR/models.json" <<JSON\n${JSON.stringify(models)}\nJSON`,
        `${bin} ${flags.join(' ')} "$ROLLOUT_TASK_INSTRUCTION" </dev/null > ${logsDir}/pi.txt 2>&1`,
      ].join('\n'),
    };
  },
});
