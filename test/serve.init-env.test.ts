/**
 * `rollout serve` /init against a hostile caller (review M3, L7), at the unit level: a caller-chosen
 * `model_base_url` never gets the operator's key (the agent's env is merged as the execute step merges it, then
 * read by the gateway's upstream selection), and credentials in `completion_params` never reach the plain-text env.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { upstreamsFromEnv } from '../src/gateway/upstreams';
import { initRequestSchema, rolloutAgentEnv } from '../src/serve/remote-rollouts';
import { sealEnv, unsealEnv } from '../src/secrets/sealed-env';

const OPERATOR = { OPENAI_API_KEY: 'sk-operator-canary', OPENAI_BASE_URL: 'https://api.openai.com/v1' };

function init(extra: Record<string, unknown>) {
  return initRequestSchema('row_id').parse({
    completion_params: {
      model: 'gpt-5',
      max_tokens: 100,
      api_key: 'sk-in-params',
      extra_headers: { Authorization: 'Bearer sk-in-headers' },
      extra_body: { nested: { secret: 'sk-nested', temperature: 0 } },
    },
    metadata: { rollout_id: 'r1', row_id: 'task' },
    ...extra,
  });
}

describe('rollout serve /init: a hostile caller', () => {
  it("never pairs the caller's model_base_url with the operator's key", () => {
    const env = { ...OPERATOR, ...rolloutAgentEnv(init({}), 'https://attacker.example/v1') };
    const upstream = upstreamsFromEnv(env).openai;
    assert.equal(upstream.baseUrl, 'https://attacker.example/v1');
    assert.equal(upstream.apiKey, null, 'no key goes to the caller-chosen URL');
    // With /init's own api_key (sealed, merged last as the execute step does): that key, and only it.
    const sealed = unsealEnv(sealEnv({ ROLLOUT_API_KEY: 'sk-caller', OPENAI_API_KEY: 'sk-caller' }));
    const withKey = { ...OPERATOR, ...rolloutAgentEnv(init({}), 'https://attacker.example/v1'), ...sealed };
    assert.equal(upstreamsFromEnv(withKey).openai.apiKey, 'sk-caller');
    // Without a caller URL, the operator's own upstream and key are kept.
    assert.equal(
      upstreamsFromEnv({ ...OPERATOR, ...rolloutAgentEnv(init({}), undefined) }).openai.apiKey,
      OPERATOR.OPENAI_API_KEY
    );
  });

  it('strips credential-like fields from completion_params at any depth', () => {
    const env = rolloutAgentEnv(init({}), undefined);
    const params = JSON.parse(env.ROLLOUT_COMPLETION_PARAMS!) as Record<string, unknown>;
    assert.deepEqual(params, { model: 'gpt-5', max_tokens: 100, extra_body: { nested: { temperature: 0 } } });
    assert.ok(!JSON.stringify(env).includes('sk-'), JSON.stringify(env));
  });
});
