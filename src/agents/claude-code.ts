import { z } from 'zod';

import { defineAgent } from './builtin';
import { shellQuote } from '../shell';

/** Anthropic's Claude Code, headless (`--print`, stream-json), with every permission granted inside the sandbox. */
export default defineAgent({
  name: 'claude-code',
  description: "Anthropic's Claude Code CLI",
  version: '2.1.330',
  source: { registry: 'npm', package: '@anthropic-ai/claude-code', bin: 'claude' },
  wireApi: 'anthropic-messages',
  verified: true,
  systemPackages: { procps: 'ps' },
  kwargs: z.strictObject({
    max_turns: z.number().int().positive().optional(),
    permission_mode: z.enum(['bypassPermissions', 'acceptEdits', 'default', 'plan']).default('bypassPermissions'),
  }),
  run({ model, kwargs, bin, logsDir }) {
    const flags = [`--permission-mode=${kwargs.permission_mode}`];
    if (kwargs.max_turns !== undefined) flags.push(`--max-turns=${kwargs.max_turns}`);
    if (model !== undefined) flags.push(`--model=${shellQuote(model)}`);
    const models = model === undefined ? {} : modelAliases(model);
    return {
      // As root, bypassPermissions needs IS_SANDBOX; without the traffic switch, telemetry bypasses the base URL.
      env: {
        IS_SANDBOX: '1',
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
        DISABLE_AUTOUPDATER: '1',
        CLAUDE_CONFIG_DIR: `${logsDir}/claude-sessions`,
        ...models,
      },
      script: `${bin} --verbose --output-format=stream-json ${flags.join(' ')} --print -- "$ROLLOUT_TASK_INSTRUCTION" </dev/null > ${logsDir}/claude-code.txt 2>&1`,
    };
  },
});

/** Every model slot (main, aliases, sub-agents) uses the chosen model: a custom endpoint may serve only that one. */
function modelAliases(model: string): Record<string, string> {
  const slots = ['ANTHROPIC_MODEL', 'ANTHROPIC_DEFAULT_SONNET_MODEL', 'ANTHROPIC_DEFAULT_OPUS_MODEL'];
  slots.push('ANTHROPIC_DEFAULT_HAIKU_MODEL', 'CLAUDE_CODE_SUBAGENT_MODEL');
  return Object.fromEntries(slots.map((slot) => [slot, model]));
}
