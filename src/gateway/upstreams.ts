/**
 * Where each vendor's calls go, read from the agent's env on the worker (like secrets), and the env a container
 * gets instead: gateway base URLs and a per-trial token in place of the real keys.
 */
import type { GatewayAccess } from '../contracts/agent';
import type { Vendor } from './dialect';

export interface Upstream {
  /** The vendor root as its SDKs take it: OpenAI's includes `/v1`; Anthropic's and Gemini's do not. */
  baseUrl: string;
  /** The real key, put on upstream requests only; null sends none. */
  apiKey: string | null;
}

export type Upstreams = Record<Vendor, Upstream>;

/** Per vendor: the env variables of its key and base URL (first set wins) and its default base URL. */
export const VENDOR_ENV: Record<Vendor, { keys: string[]; baseUrls: string[]; defaultBaseUrl: string }> = {
  // ROLLOUT_*: what `rollout serve` hands a remote rollout's agent (the /init request's key and base URL).
  openai: {
    keys: ['OPENAI_API_KEY', 'ROLLOUT_API_KEY'],
    baseUrls: ['OPENAI_BASE_URL', 'OPENAI_API_BASE', 'ROLLOUT_MODEL_BASE_URL'],
    defaultBaseUrl: 'https://api.openai.com/v1',
  },
  anthropic: {
    keys: ['ANTHROPIC_API_KEY', 'ANTHROPIC_AUTH_TOKEN'],
    baseUrls: ['ANTHROPIC_BASE_URL'],
    defaultBaseUrl: 'https://api.anthropic.com',
  },
  gemini: {
    keys: ['GEMINI_API_KEY', 'GOOGLE_API_KEY'],
    baseUrls: ['GOOGLE_GEMINI_BASE_URL'],
    defaultBaseUrl: 'https://generativelanguage.googleapis.com',
  },
};

const VENDORS = Object.keys(VENDOR_ENV) as Vendor[];

function first(env: Record<string, string>, names: string[]): string | undefined {
  return names.map((name) => env[name]).find((value) => value !== undefined && value !== '');
}

export function upstreamsFromEnv(env: Record<string, string>): Upstreams {
  const entries = VENDORS.map((vendor) => {
    const spec = VENDOR_ENV[vendor];
    const baseUrl = (first(env, spec.baseUrls) ?? spec.defaultBaseUrl).replace(/\/+$/, '');
    return [vendor, { baseUrl, apiKey: first(env, spec.keys) ?? null }] as const;
  });
  return Object.fromEntries(entries) as Upstreams;
}

/**
 * The agent env with every vendor key variable replaced by the token and every base URL variable pointing at the
 * gateway; the standard ones (OPENAI_*, ANTHROPIC_*, GEMINI_API_KEY, GOOGLE_GEMINI_BASE_URL) always set.
 */
export function gatewayEnv(env: Record<string, string>, access: GatewayAccess): Record<string, string> {
  const out = { ...env };
  for (const vendor of VENDORS) {
    const spec = VENDOR_ENV[vendor];
    for (const name of spec.keys) if (name in out || name === spec.keys[0]) out[name] = access.token;
    for (const name of spec.baseUrls) if (name in out || name === spec.baseUrls[0]) out[name] = access.baseUrls[vendor];
  }
  return out;
}
