/**
 * One cheap authenticated call to an upstream, at no cost: its model list (OpenAI `GET /models`, Anthropic
 * `GET /v1/models`, Gemini `GET /v1beta/models`), through the same proxy settings as the gateway. Says whether the
 * upstream can be reached and whether it takes the key.
 */
import type { Vendor } from './dialect';
import { UpstreamAgents, requestFor } from './upstream-agents';
import type { Upstream } from './upstreams';

const PROBE_TIMEOUT_MS = 10_000;

export type ProbeResult =
  { ok: true; status: number } | { ok: false; reason: 'unreachable' | 'rejected'; detail: string };

const MODEL_LISTS: Record<Vendor, string> = { openai: '/models', anthropic: '/v1/models', gemini: '/v1beta/models' };

export async function probeUpstream(vendor: Vendor, upstream: Upstream): Promise<ProbeResult> {
  const target = new URL(upstream.baseUrl + MODEL_LISTS[vendor]);
  const headers: Record<string, string> = {};
  if (upstream.apiKey !== null) {
    if (vendor === 'openai') headers.authorization = `Bearer ${upstream.apiKey}`;
    else if (vendor === 'anthropic') Object.assign(headers, { 'x-api-key': upstream.apiKey });
    else headers['x-goog-api-key'] = upstream.apiKey;
  }
  if (vendor === 'anthropic') headers['anthropic-version'] = '2023-06-01';
  const agents = new UpstreamAgents();
  try {
    const { status } = await probeRequest(target, agents, { method: 'GET', headers, timeoutMs: PROBE_TIMEOUT_MS });
    if (status === 401 || status === 403) return { ok: false, reason: 'rejected', detail: `HTTP ${status}` };
    return { ok: true, status };
  } catch (err) {
    return { ok: false, reason: 'unreachable', detail: (err as Error).message };
  } finally {
    agents.destroy();
  }
}

/** One request of a probe, bounded by `timeoutMs`: its status and whole body. */
export function probeRequest(
  target: URL,
  agents: UpstreamAgents,
  options: { method: string; headers: Record<string, string>; payload?: Buffer; timeoutMs: number }
): Promise<{ status: number; body: string }> {
  const { method, headers, payload, timeoutMs } = options;
  return new Promise((resolve, reject) => {
    const request = requestFor(target)(target, { method, headers, agent: agents.for(target), timeout: timeoutMs });
    request.on('timeout', () => request.destroy(new Error(`no answer within ${timeoutMs / 1000} s`)));
    request.on('error', reject);
    request.on('response', (response) => {
      const chunks: Buffer[] = [];
      response.on('data', (chunk: Buffer) => chunks.push(chunk));
      response.on('end', () =>
        resolve({ status: response.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') })
      );
      response.on('error', reject);
    });
    request.end(payload);
  });
}
