/**
 * What the gateway forwards with the real key, per vendor: each vendor's generate, count-tokens and model-list
 * routes (method and exact path below the vendor root), and the request headers agents need for them. Anything else
 * (files, batches, fine-tuning, organisation and key endpoints, a WebSocket upgrade) is answered 403 here and never
 * sent upstream; any other header is dropped (OpenAI-Organization, OpenAI-Project, x-goog-user-project: they would
 * choose another account's project or billing).
 */
import type http from 'node:http';

import type { CallKind, Vendor } from './dialect';
import type { CredentialPlace } from './wire';
import { readBody, reply } from './wire';

interface Route {
  method: 'GET' | 'POST';
  path: RegExp;
  kind: CallKind;
}

const GEMINI_VERSION = '/(?:v1|v1beta|v1alpha)';
const GEMINI_MODEL = '(?:tunedModels|models)/[A-Za-z0-9._@-]+';

const ROUTES: Record<Vendor, Route[]> = {
  // Below `/openai/v1`: Chat Completions, Completions (vLLM, SGLang) and Responses (codex), input-token counts, the
  // model list.
  openai: [
    { method: 'POST', path: /^\/chat\/completions$/, kind: 'generate' },
    { method: 'POST', path: /^\/completions$/, kind: 'generate' },
    { method: 'POST', path: /^\/responses$/, kind: 'generate' },
    { method: 'POST', path: /^\/responses\/input_tokens$/, kind: 'count_tokens' },
    { method: 'GET', path: /^\/models$/, kind: 'other' },
    { method: 'GET', path: /^\/models\/[A-Za-z0-9._:@/-]+$/, kind: 'other' },
  ],
  // Below `/anthropic`: Messages (claude-code adds `?beta=true`), count_tokens, the model list.
  anthropic: [
    { method: 'POST', path: /^\/v1\/messages$/, kind: 'generate' },
    { method: 'POST', path: /^\/v1\/messages\/count_tokens$/, kind: 'count_tokens' },
    { method: 'GET', path: /^\/v1\/models$/, kind: 'other' },
    { method: 'GET', path: /^\/v1\/models\/[A-Za-z0-9._:@-]+$/, kind: 'other' },
  ],
  // Below `/gemini`: generateContent, streamGenerateContent, countTokens (gemini-cli), the model list.
  gemini: [
    {
      method: 'POST',
      path: new RegExp(`^${GEMINI_VERSION}/${GEMINI_MODEL}:(?:generateContent|streamGenerateContent)$`),
      kind: 'generate',
    },
    { method: 'POST', path: new RegExp(`^${GEMINI_VERSION}/${GEMINI_MODEL}:countTokens$`), kind: 'count_tokens' },
    { method: 'GET', path: new RegExp(`^${GEMINI_VERSION}/models$`), kind: 'other' },
    { method: 'GET', path: new RegExp(`^${GEMINI_VERSION}/${GEMINI_MODEL}$`), kind: 'other' },
  ],
};

/** The kind of an allowed call, or null: refused (403), never sent upstream. */
export function allowedRoute(vendor: Vendor, method: string, path: string): CallKind | null {
  const route = ROUTES[vendor].find(
    (r) => (r.method === method || (r.method === 'GET' && method === 'HEAD')) && r.path.test(path)
  );
  return route?.kind ?? null;
}

/**
 * Request headers passed upstream (lower case): the body's type, what the agent accepts, the vendors' API version
 * and beta flags (claude-code sends `anthropic-version` and `anthropic-beta` on every Messages call; codex
 * `openai-beta`), the SDKs' own identification (`x-stainless-*`, `x-goog-api-client`, `user-agent`) and codex's
 * session headers. Credentials are set by the gateway itself.
 */
const PASSED = new Set([
  'content-type',
  'accept',
  'user-agent',
  'anthropic-version',
  'anthropic-beta',
  'openai-beta',
  'x-goog-api-client',
  'x-session-id',
  'session_id',
  'conversation_id',
  'originator',
  'idempotency-key',
  'x-request-id',
]);

/**
 * `anthropic-beta` flags that open other parts of the account from a Messages call (files uploaded by anyone on the
 * account, remote MCP servers, code execution billed separately, skills): dropped; the rest are model behaviour.
 */
const ACCOUNT_BETAS = /^(?:files-api|mcp-client|code-execution|skills|container)/;

export function passedHeaders(headers: Record<string, string | string[] | undefined>): Record<string, string> {
  const passed: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined) continue;
    if (!PASSED.has(name) && !name.startsWith('x-stainless-')) continue;
    const text = Array.isArray(value) ? value.join(', ') : value;
    if (name === 'anthropic-beta') {
      const kept = text
        .split(',')
        .map((flag) => flag.trim())
        .filter((flag) => flag && !ACCOUNT_BETAS.test(flag));
      if (kept.length > 0) passed[name] = kept.join(',');
    } else passed[name] = text;
  }
  return passed;
}

/** The largest request body forwarded (a long context with images fits many times); larger ones get 413. */
export const MAX_REQUEST_BYTES = 32 * 2 ** 20;

/**
 * The call's kind, method and body; or null once answered: 403 for a route this gateway does not forward (files,
 * batches, fine-tuning, organisation endpoints, a WebSocket upgrade: never sent upstream with the key), 413 for a
 * body over MAX_REQUEST_BYTES.
 */
export async function acceptedCall(
  req: http.IncomingMessage,
  res: http.ServerResponse,
  vendor: Vendor,
  rest: string
): Promise<{ kind: CallKind; method: string; received: Buffer } | null> {
  const method = req.method ?? 'GET';
  const kind = allowedRoute(vendor, method, rest);
  if (kind === null) {
    req.resume();
    reply(res, 403, `rollout: ${method} ${rest} is not a model call this gateway forwards`, vendor);
    return null;
  }
  const received = await readBody(req, MAX_REQUEST_BYTES);
  if (received === null) {
    res.setHeader('connection', 'close');
    reply(res, 413, `rollout: request body over ${MAX_REQUEST_BYTES / 2 ** 20} MiB`, vendor);
    return null;
  }
  return { kind, method, received };
}

/** Where a key the agent passed as `?key=` goes upstream instead: the vendor's own header (a key in a URL ends up in
 * proxies' and error pages' URLs). */
const QUERY_KEY_HEADER: Record<Vendor, 'authorization' | 'x-api-key' | 'x-goog-api-key'> = {
  openai: 'authorization',
  anthropic: 'x-api-key',
  gemini: 'x-goog-api-key',
};

export function upstreamKeyPlace(vendor: Vendor, where: CredentialPlace): { where: CredentialPlace } {
  return { where: where === 'query' ? QUERY_KEY_HEADER[vendor] : where };
}
