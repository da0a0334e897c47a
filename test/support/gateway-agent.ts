/**
 * The gateway fixture (test/fixtures/gateway-agent): a hello-world copy whose verifier looks for the real key
 * (ROLLOUT_TEST_KEY) everywhere in the container, and custom agents in bash that call the model through the
 * gateway (bookworm-slim has no curl: bash's /dev/tcp speaks the HTTP).
 */
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';

import { REPO_ROOT } from './temporal';

const FIXTURES = path.join(REPO_ROOT, 'test', 'fixtures', 'gateway-agent');

/** Gives the task at `taskDir` the key-probing verifier; returns the two-turn agent script. */
export async function prepareGatewayTask(taskDir: string): Promise<string> {
  await writeFile(path.join(taskDir, 'tests', 'test.sh'), await readFile(path.join(FIXTURES, 'verifier.sh')));
  const toml = await readFile(path.join(taskDir, 'task.toml'), 'utf8');
  await writeFile(
    path.join(taskDir, 'task.toml'),
    toml.replace('[verifier]\n', '[verifier]\nenv = { KEY_PROBE = "${ROLLOUT_TEST_KEY}" }\n')
  );
  return readFile(path.join(FIXTURES, 'agent.sh'), 'utf8');
}

/** A job.yaml `agents:` entry: a custom agent on the gateway running `script`, with `env`. */
export function gatewayAgentYaml(name: string, script: string, env: Record<string, string>): string {
  return [
    `  - name: ${name}`,
    '    gateway: true',
    '    execute: |',
    ...script
      .trimEnd()
      .split('\n')
      .map((line) => `      ${line}`),
    '    env:',
    ...Object.entries(env).map(([key, value]) => `      ${key}: '${value}'`),
  ].join('\n');
}
