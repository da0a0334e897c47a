import { z } from 'zod';

import { defineAgent } from './builtin';
import { shellQuote } from '../shell';

/**
 * Continue's CLI (`cn`, plain JavaScript) headless (`-p`, every tool allowed with `--auto`), its model an `openai`
 * provider from a config file of Rollout's own whose base URL and key are `${{ secrets.… }}` references that cn
 * resolves from $OPENAI_BASE_URL and $OPENAI_API_KEY: the key is never written to a file. Its home is a folder of
 * its own (CONTINUE_GLOBAL_DIR) with self-updates off; telemetry and metrics are off. Headless mode makes no Continue
 * account or hub call when the config is a local file.
 */
export default defineAgent({
  name: 'continue-cli',
  description: "Continue's CLI (cn)",
  version: '1.5.47',
  source: { registry: 'npm', package: '@continuedev/cli', bin: 'cn' },
  wireApi: 'openai-chat-completions',
  verified: true,
  systemPackages: {},
  kwargs: z.strictObject({}),
  run({ model, bin, logsDir }) {
    const name = model ?? 'default';
    const config = {
      name: 'rollout',
      version: '1.0.0',
      schema: 'v1',
      models: [
        {
          name,
          provider: 'openai',
          model: name,
          apiBase: '${{ secrets.ROLLOUT_CONTINUE_BASE_URL }}',
          apiKey: '${{ secrets.OPENAI_API_KEY }}',
          roles: ['chat', 'edit', 'apply'],
        },
      ],
    };
    const home = '"$CONTINUE_GLOBAL_DIR"';
    return {
      env: {
        CONTINUE_GLOBAL_DIR: '/tmp/rollout-continue',
        CONTINUE_CLI_ENABLE_TELEMETRY: '0',
        CONTINUE_METRICS_ENABLED: '0',
      },
      script: [
        'export ROLLOUT_CONTINUE_BASE_URL="${OPENAI_BASE_URL:-https://api.openai.com/v1}"',
        `mkdir -p ${home}/index`,
        `printf '%s' '{"autoUpdateCli":false}' > ${home}/index/globalContext.json`,
        // JSON is YAML: the config as cn reads it.
        `printf '%s' ${shellQuote(JSON.stringify(config))} > ${home}/rollout-config.yaml`,
        `status=0; ${bin} -p --auto --config ${home}/rollout-config.yaml "$ROLLOUT_TASK_INSTRUCTION" </dev/null > ${logsDir}/continue-cli.txt 2>&1 || status=$?`,
        `cp -r ${home}/sessions ${logsDir}/continue-sessions 2>/dev/null || true`,
        `cp ${home}/logs/cn.log ${logsDir}/cn.log 2>/dev/null || true`,
        'exit $status',
      ].join('\n'),
    };
  },
});
