/**
 * Every key task.toml accepts either acts or is named in the trial's unenforced_limits: the schema is walked, so a
 * key added to it without a line in TASK_KEYS (how Rollout handles it) fails here instead of being silently ignored.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import type { z } from 'zod';

import {
  networkPlan,
  phaseNetworks,
  TASK_KEYS,
  unenforcedTaskKeys,
  UnsupportedNetworkError,
} from '../../src/task/policy';
import { TaskConfigSchema } from '../../src/contracts/task-config';

/** Wrappers that do not change which keys a value has. */
const WRAPPERS = new Set(['optional', 'default', 'prefault', 'nullable', 'pipe', 'transform']);

/**
 * Dotted paths of a schema's keys: objects with a fixed shape are walked into; a table of free keys (a record, or
 * `[task]`, which keeps unknown keys), a table TASK_KEYS handles as a whole (e.g. a separate verifier's
 * `[verifier.environment]`), and anything else is one key.
 */
function schemaKeys(schema: z.ZodType, prefix: string): string[] {
  if (prefix in TASK_KEYS) return [prefix];
  const def = (schema as unknown as { def: { type: string; innerType?: z.ZodType; in?: z.ZodType; shape?: object } })
    .def;
  if (WRAPPERS.has(def.type)) {
    const inner = def.innerType ?? def.in;
    return inner ? schemaKeys(inner, prefix) : [prefix];
  }
  // An array of tables (`[[steps]]`): its entries' keys.
  const element = (def as { element?: z.ZodType }).element;
  if (def.type === 'array' && element) return schemaKeys(element, prefix);
  const catchall = (def as { catchall?: { def: { type: string } } }).catchall;
  if (def.type === 'object' && def.shape && !(catchall && catchall.def.type !== 'never')) {
    return Object.entries(def.shape as Record<string, z.ZodType>).flatMap(([key, value]) =>
      schemaKeys(value, prefix ? `${prefix}.${key}` : key)
    );
  }
  return [prefix];
}

const parse = (raw: object) => TaskConfigSchema.parse(raw);

describe('task.toml keys', () => {
  it('has a handling (acts, describes or unenforced) for every key of the schema, and none for a key it lacks', () => {
    const keys = schemaKeys(TaskConfigSchema, '').sort();
    assert.ok(keys.includes('environment.healthcheck.retries'), 'the walk reaches nested tables');
    assert.ok(keys.includes('agent.user'));
    assert.deepEqual(keys, Object.keys(TASK_KEYS).sort());
  });

  it('names the unenforced keys a task sets, not the ones it leaves empty', () => {
    const config = parse({
      environment: { skills_dir: '/skills', mcp_servers: [], gpu_types: ['H100'] },
      multi_step_reward_strategy: 'mean',
    });
    assert.deepEqual(unenforcedTaskKeys(config).sort(), ['environment.gpu_types', 'environment.skills_dir']);
    assert.deepEqual(unenforcedTaskKeys(parse({})), []);
  });

  it('resolves the network of each phase as Harbor does', () => {
    assert.deepEqual(networkPlan(parse({})), { baseline: 'public', agent: 'public', verifier: 'public' });
    assert.deepEqual(networkPlan(parse({ environment: { allow_internet: false } })).baseline, 'no-network');
    // An explicit network_mode wins over the older allow_internet.
    const both = parse({ environment: { allow_internet: false, network_mode: 'public' } });
    assert.equal(networkPlan(both).baseline, 'public');
    const agentOnly = parse({ environment: { network_mode: 'no-network' }, agent: { network_mode: 'public' } });
    assert.deepEqual(phaseNetworks(agentOnly), { baseline: 'none', agent: 'public', verifier: 'none' });
    const allowlist = parse({ verifier: { network_mode: 'allowlist', allowed_hosts: ['pypi.org'] } });
    assert.throws(() => phaseNetworks(allowlist), UnsupportedNetworkError);
  });

  it('takes users as names or uids, and healthchecks with Harbor defaults', () => {
    const config = parse({
      agent: { user: 1000 },
      verifier: { user: 'checker' },
      environment: { healthcheck: { command: 'true' } },
    });
    assert.equal(config.agent.user, '1000');
    assert.equal(config.verifier.user, 'checker');
    assert.deepEqual(config.environment.healthcheck, {
      command: 'true',
      interval_sec: 5,
      timeout_sec: 30,
      start_period_sec: 0,
      start_interval_sec: 5,
      retries: 3,
    });
    assert.equal(TaskConfigSchema.safeParse({ environment: { network_mode: 'offline' } }).success, false);
    assert.equal(TaskConfigSchema.safeParse({ environment: { healthcheck: { interval_sec: 1 } } }).success, false);
  });
});
