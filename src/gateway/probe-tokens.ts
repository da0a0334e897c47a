/**
 * The preflight of job.yaml `tokens: true`: one small generation call to the upstream, shaped exactly as the gateway
 * shapes the agent's calls (call-additions.ts) and read by the same dialect, so a server that would return no token
 * ids (not vLLM ≥ 0.10.2 or SGLang, or a route without them) is known before any trial starts.
 */
import { shapeCall } from './call-additions';
import type { Json } from './dialect';
import { dialectByName } from './dialects';
import { probeRequest } from './probe';
import { UpstreamAgents } from './upstream-agents';
import type { Upstream } from './upstreams';

const PROBE_TIMEOUT_MS = 60_000;

/** The generation route probed per dialect, with the smallest request that makes the server sample. */
const PROBES: Record<string, { path: string; body: (model: string) => Json }> = {
  'openai-chat': {
    path: '/chat/completions',
    body: (model) => ({ model, messages: [{ role: 'user', content: 'Say ok.' }], max_tokens: 4 }),
  },
  'openai-responses': {
    path: '/responses',
    body: (model) => ({ model, input: 'Say ok.', max_output_tokens: 16, store: false }),
  },
};

/** Null when the upstream returns prompt and completion ids; else why not, in a few words. */
export async function probeTokens(
  dialectName: string,
  upstream: Upstream,
  model: string | null
): Promise<string | null> {
  const probe = PROBES[dialectName];
  const dialect = dialectByName(dialectName);
  if (!probe || !dialect?.requestTokens) return `no supported server returns token ids on ${dialectName} calls`;
  const agents = new UpstreamAgents();
  try {
    const name = model ?? (await firstModel(upstream, agents));
    const shaped = shapeCall(dialect, probe.body(name ?? 'default'), { tokens: true })!;
    const { status, body } = await send(upstream, agents, 'POST', probe.path, shaped.body);
    if (status >= 400) return `POST ${probe.path} answered HTTP ${status}: ${body.slice(0, 200)}`;
    let tokens;
    try {
      tokens = dialect.tokens!(JSON.parse(body));
    } catch {
      return `POST ${probe.path} did not answer JSON`;
    }
    const missing = [
      ...(tokens?.prompt_token_ids ? [] : ['prompt ids']),
      ...(tokens?.token_ids ? [] : ['completion ids']),
    ];
    if (missing.length === 0) return null;
    return `POST ${probe.path} with ${shaped.added.join(', ')} returned no ${missing.join(' and no ')}`;
  } catch (err) {
    return `POST ${probe.path}: ${(err as Error).message}`;
  } finally {
    agents.destroy();
  }
}

/** The upstream's first model (an inference server serves one), for a probe whose agent names none. */
async function firstModel(upstream: Upstream, agents: UpstreamAgents): Promise<string | null> {
  const { status, body } = await send(upstream, agents, 'GET', '/models');
  if (status >= 400) return null;
  try {
    const data = (JSON.parse(body) as { data?: { id?: unknown }[] }).data;
    return typeof data?.[0]?.id === 'string' ? data[0].id : null;
  } catch {
    return null;
  }
}

function send(
  upstream: Upstream,
  agents: UpstreamAgents,
  method: string,
  route: string,
  json?: Json
): Promise<{ status: number; body: string }> {
  const target = new URL(upstream.baseUrl + route);
  const payload = json ? Buffer.from(JSON.stringify(json)) : null;
  const headers: Record<string, string> = payload
    ? { 'content-type': 'application/json', 'content-length': String(payload.length) }
    : {};
  if (upstream.apiKey !== null) headers.authorization = `Bearer ${upstream.apiKey}`;
  return probeRequest(target, agents, {
    method,
    headers,
    ...(payload ? { payload } : {}),
    timeoutMs: PROBE_TIMEOUT_MS,
  });
}
