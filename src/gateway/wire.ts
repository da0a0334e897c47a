/** HTTP details of the gateway's two sides: the agent's credential, replies in each vendor's error shape, bodies. */
import type http from 'node:http';

import type { Dialect, Vendor } from './dialect';
import type { SseParser } from './sse';

/** The most of a non-streamed response body kept in a call record. */
export const MAX_RECORDED_BYTES = 32 * 2 ** 20;

export const HOP_BY_HOP = new Set([
  'host',
  'connection',
  'keep-alive',
  'proxy-connection',
  'transfer-encoding',
  'upgrade',
  'te',
  'trailer',
]);

export type CredentialPlace = 'authorization' | 'x-api-key' | 'x-goog-api-key' | 'query';

/** Where the agent put its (per-trial) credential, so the real key goes to the same place upstream. */
export function credentialOf(req: http.IncomingMessage, url: URL): { value: string; where: CredentialPlace } | null {
  const auth = req.headers.authorization;
  if (auth) return { value: auth.replace(/^Bearer\s+/i, ''), where: 'authorization' };
  for (const where of ['x-api-key', 'x-goog-api-key'] as const) {
    const value = req.headers[where];
    if (typeof value === 'string') return { value, where };
  }
  const key = url.searchParams.get('key');
  return key ? { value: key, where: 'query' } : null;
}

/** Where a call goes upstream, with the real key where the client put the token (each SDK's own auth scheme kept). */
export function upstreamTarget(
  upstream: { baseUrl: string; apiKey: string | null },
  rest: string,
  query: URLSearchParams,
  headers: http.OutgoingHttpHeaders,
  credential: { where: CredentialPlace }
): { target: URL; headers: http.OutgoingHttpHeaders } {
  const target = new URL(upstream.baseUrl + rest);
  for (const [key, value] of query) if (key !== 'key') target.searchParams.append(key, value);
  const keyed = { ...headers };
  if (upstream.apiKey !== null) {
    if (credential.where === 'query') target.searchParams.set('key', upstream.apiKey);
    else if (credential.where === 'authorization') keyed.authorization = `Bearer ${upstream.apiKey}`;
    else keyed[credential.where] = upstream.apiKey;
  }
  return { target, headers: keyed };
}

/** An error in the shape the vendor's SDK expects, so the agent reports it sensibly. */
export function reply(res: http.ServerResponse, status: number, message: string, vendor?: Vendor): void {
  const body =
    vendor === 'anthropic'
      ? { type: 'error', error: { type: status === 401 ? 'authentication_error' : 'api_error', message } }
      : { error: { message, code: status } };
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

export async function readBody(req: http.IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of req as AsyncIterable<Buffer>) chunks.push(chunk);
  return Buffer.concat(chunks);
}

export function parseJson(body: Buffer): Record<string, unknown> | null {
  try {
    const value: unknown = JSON.parse(body.toString('utf8'));
    return value !== null && typeof value === 'object' && !Array.isArray(value)
      ? (value as Record<string, unknown>)
      : null;
  } catch {
    return null;
  }
}

/** The recorded response: rebuilt from SSE events or from a JSON array of chunks (Gemini without alt=sse). */
export function responseOf(dialect: Dialect | null, parser: SseParser | null, body: Buffer, size: number): unknown {
  if (parser && dialect) return dialect.assemble(parser.end());
  if (size > MAX_RECORDED_BYTES) return `[response of ${size} bytes not recorded]`;
  const text = body.toString('utf8');
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return text;
  }
  if (dialect && Array.isArray(value))
    return dialect.assemble(value.map((v) => ({ event: null, data: JSON.stringify(v) })));
  return value;
}
