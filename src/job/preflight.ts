/**
 * Before any trial starts: for each agent whose model calls go through the gateway, its upstream's key is there
 * (input error, exit 2, naming the variable) and one cheap authenticated call succeeds (PreflightError, exit 3,
 * when the upstream cannot be reached or rejects the key). `--skip-preflight` for upstreams with no model list.
 * Keys are read where the worker reads them: this process's environment, through the agent's `env`.
 */
import { catalogueAgent, usesGateway } from '../agents/config';
import type { WireApi } from '../agents/builtin';
import { resolveEnv } from '../env-vars';
import type { Problem } from '../contracts/errors';
import { InputError } from '../contracts/errors';
import type { Vendor } from '../gateway/dialect';
import { probeUpstream } from '../gateway/probe';
import { probeTokens } from '../gateway/probe-tokens';
import type { Upstream } from '../gateway/upstreams';
import { VENDOR_ENV, upstreamsFromEnv } from '../gateway/upstreams';
import type { AgentConfig } from '../contracts/job-config';

/** An upstream that cannot be reached or rejects the key: nothing was started. */
export class PreflightError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'PreflightError';
  }
}

const VENDOR_OF: Record<WireApi, Vendor> = {
  'anthropic-messages': 'anthropic',
  'openai-chat-completions': 'openai',
  'openai-responses': 'openai',
  gemini: 'gemini',
};

export interface UpstreamCheck {
  agent: string;
  vendor: Vendor;
  upstream: Upstream;
  /** job.yaml `tokens: true`: the dialect whose calls must come back with token ids, and the model to ask. */
  tokens?: { dialect: string; model: string | null };
}

const DIALECT_OF: Record<WireApi, string> = {
  'anthropic-messages': 'anthropic',
  'openai-chat-completions': 'openai-chat',
  'openai-responses': 'openai-responses',
  gemini: 'gemini',
};

/** The dialect an agent's calls to `vendor` speak: its wire API's, or (custom agents) the vendor's usual one. */
function dialectOf(config: AgentConfig, vendor: Vendor): string {
  const builtin = catalogueAgent(config);
  if (builtin) return DIALECT_OF[builtin.wireApi];
  return vendor === 'openai' ? 'openai-chat' : vendor;
}

/** The upstreams an agent calls through the gateway: its wire API's, or (custom agents) those its env names. */
function vendorsOf(config: AgentConfig, env: Record<string, string>): Vendor[] {
  const builtin = catalogueAgent(config);
  if (builtin) return [VENDOR_OF[builtin.wireApi]];
  return (Object.keys(VENDOR_ENV) as Vendor[]).filter((vendor) =>
    [...VENDOR_ENV[vendor].keys, ...VENDOR_ENV[vendor].baseUrls].some((name) => env[name])
  );
}

/** The upstreams to probe, once every gateway agent's key is known present (else an input error naming it). */
export function upstreamChecks(agents: readonly AgentConfig[], file: string): UpstreamCheck[] {
  const problems: Problem[] = [];
  const checks = new Map<string, UpstreamCheck>();
  agents.forEach((config, index) => {
    if (!usesGateway(config)) return;
    // Called once the plan found every ${VAR} set.
    const env = resolveEnv(config.env, process.env);
    const upstreams = upstreamsFromEnv(env);
    for (const vendor of vendorsOf(config, env)) {
      const upstream = upstreams[vendor];
      const spec = VENDOR_ENV[vendor];
      // A server of one's own (a base URL given) may take no key; the vendor's own endpoint always needs one.
      if (upstream.apiKey === null && upstream.baseUrl === spec.defaultBaseUrl) {
        const variable = spec.keys[0]!;
        problems.push({
          file,
          field: `agents.${index}.env`,
          message: `${variable} is not set: ${config.name} calls ${spec.defaultBaseUrl} (add ${variable}: \${${variable}} to its env)`,
        });
        continue;
      }
      // With `tokens: true`, each replica is an upstream of its own: every one must return ids.
      const bases = config.tokens && vendor === 'openai' && config.replicas ? config.replicas : [upstream.baseUrl];
      for (const baseUrl of bases) {
        const tokens = config.tokens ? { dialect: dialectOf(config, vendor), model: servedModel(config) } : undefined;
        const key = `${vendor} ${baseUrl} ${upstream.apiKey} ${tokens ? JSON.stringify(tokens) : ''}`;
        checks.set(key, { agent: config.name, vendor, upstream: { ...upstream, baseUrl }, tokens });
      }
    }
  });
  if (problems.length > 0) throw new InputError(problems);
  return [...checks.values()];
}

/** The model name an agent sends upstream: its `model` without a routing prefix (litellm's `openai/…`), if any. */
function servedModel(config: AgentConfig): string | null {
  const model = (config as { model?: unknown }).model;
  return typeof model === 'string' && model ? model.replace(/^(openai|hosted_vllm|vllm)\//, '') : null;
}

/**
 * One cheap authenticated call per upstream, all at once; for `tokens: true`, one small generation asking for token
 * ids as the gateway asks. The first that failed, as one line.
 */
export async function probeUpstreams(checks: readonly UpstreamCheck[]): Promise<void> {
  const results = await Promise.all(
    checks.map(async (check) => ({ check, result: await probeUpstream(check.vendor, check.upstream) }))
  );
  for (const { check, result } of results) {
    if (result.ok) continue;
    const what =
      result.reason === 'rejected'
        ? `rejected the key in ${VENDOR_ENV[check.vendor].keys.join(' / ')} (${result.detail})`
        : `cannot be reached (${result.detail})`;
    throw new PreflightError(
      `preflight: ${check.upstream.baseUrl} (agent ${check.agent}) ${what}; no trial was started (--skip-preflight to start anyway)`
    );
  }
  const missing = await Promise.all(
    checks.map(async (check) => ({
      check,
      why: check.tokens ? await probeTokens(check.tokens.dialect, check.upstream, check.tokens.model) : null,
    }))
  );
  for (const { check, why } of missing) {
    if (why === null) continue;
    throw new PreflightError(
      `preflight: ${check.upstream.baseUrl} (agent ${check.agent}, tokens: true) returns no token ids: ${why}; no trial was started (docs/rl.md lists the servers that do)`
    );
  }
}
