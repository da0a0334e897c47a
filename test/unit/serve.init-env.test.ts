/**
 * `rollout serve` /init against a hostile caller (review M3, L7), at the unit level: a caller-chosen
 * `model_base_url` never gets the operator's key (the agent's env is merged as the execute step merges it, then
 * read by the gateway's upstream selection), and credentials in `completion_params` never reach the plain-text env.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { upstreamsFromEnv } from '../../src/gateway/upstreams';
import { initRequestSchema, rolloutAgentEnv } from '../../src/serve/remote-rollouts';
import { SealedSecretsError, sealEnv, unsealEnv } from '../../src/secrets/sealed-env';

const TRIAL = {
  jobName: 'served',
  trialId: 'served/rollout__r1',
  jobDir: '/srv/jobs/served',
  agentName: 'policy',
  agentEnv: { ROLLOUT_MODEL: 'gpt-5' },
};
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
    const sealed = unsealEnv(sealEnv({ ROLLOUT_API_KEY: 'sk-caller', OPENAI_API_KEY: 'sk-caller' }, TRIAL), TRIAL);
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

  it('binds a sealed key to its trial: copied into another trial, or an older unbound value, it does not unseal', () => {
    const sealed = sealEnv({ OPENAI_API_KEY: 'sk-caller' }, TRIAL);
    assert.ok(!sealed.includes('sk-caller'));
    assert.deepEqual(unsealEnv(sealed, TRIAL), { OPENAI_API_KEY: 'sk-caller' });
    for (const other of [
      { ...TRIAL, trialId: 'served/rollout__r2' },
      { ...TRIAL, jobName: 'another-job' },
      // The fields are kept apart: moving a character from one to the other is another trial too.
      { ...TRIAL, jobName: 'served/', trialId: 'rollout__r1' },
      { ...TRIAL, jobDir: '/tmp/attacker/jobs/served' },
      { ...TRIAL, agentName: 'exfiltrator' },
      { ...TRIAL, agentEnv: { ...TRIAL.agentEnv, OPENAI_BASE_URL: 'https://attacker.example/v1' } },
    ]) {
      assert.throws(
        () => unsealEnv(sealed, other),
        (err: Error) =>
          err instanceof SealedSecretsError && /^sealed secrets: not sealed for this trial/.test(err.message)
      );
    }
    const unbound = sealed.replace(/^v2:[^:]+:/, 'v1:');
    assert.throws(() => unsealEnv(unbound, TRIAL), /sealed by an older Rollout, bound to no trial: refused/);
  });
});
