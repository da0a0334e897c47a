/**
 * The gateway fixture (test/fixtures/gateway-agent): a hello-world copy whose verifier looks for the real key
 * (from tests/.key-probe, which only the verifier sees: a task may not read the worker's key variable) everywhere
 * in the container, and custom agents in bash that call the model through the
 * gateway (bookworm-slim has no curl: bash's /dev/tcp speaks the HTTP).
 */
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';

import { REPO_ROOT } from './temporal';

const FIXTURES = path.join(REPO_ROOT, 'test', 'fixtures', 'gateway-agent');

/** Gives the task at `taskDir` the key-probing verifier, looking for `key`; returns the two-turn agent script. */
export async function prepareGatewayTask(taskDir: string, key: string): Promise<string> {
  await writeKeyProbe(taskDir, key);
  return readFile(path.join(FIXTURES, 'agent.sh'), 'utf8');
}

/** The key-probing verifier as the task's test.sh, and the key it looks for in tests/ (copied in only to verify). */
export async function writeKeyProbe(taskDir: string, key: string): Promise<void> {
  await writeFile(path.join(taskDir, 'tests', 'test.sh'), await readFile(path.join(FIXTURES, 'verifier.sh')));
  await writeFile(path.join(taskDir, 'tests', '.key-probe'), key);
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
