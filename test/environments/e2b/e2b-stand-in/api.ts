/**
 * The stand-in's E2B REST API (api.e2b.app as the SDK calls it at E2B_API_URL, `X-API-KEY` header): sandboxes
 * (POST/GET /v2/sandboxes, GET/DELETE /sandboxes/{id}, POST /sandboxes/{id}/timeout) and templates (see templates.ts).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';

import { ENVD_VERSION } from './sandboxes';
import type { SandboxRecord, Sandboxes } from './sandboxes';
import type { TemplateBody, Templates } from './templates';
import { readBody, readJson, sendApiError, sendEmpty, sendJson } from './wire';

export interface ApiState {
  apiKey: string;
  /** The stand-in's own address: upload links point at it. */
  baseUrl: string;
  sandboxes: Sandboxes;
  templates: Templates;
  /** Sandbox creations still to refuse with E2B's quota reply. */
  failCreates: number;
}

/** The stand-in's team's plan: Hobby, whose sandboxes live at most 1 h (E2B's pricing page; docs/e2b.md). */
const TEAM_MAX_LENGTH_HOURS = 1;

/**
 * A template's resources as E2B checks them (e2b-dev/infra packages/api/internal/team/limits.go:13-80, and
 * constants/templates.go:5 MaxTemplateCPU = 32); null when valid. The team's own maxima are its plan's.
 */
function templateResourceProblem(cpuCount?: number, memoryMB?: number): string | null {
  if (cpuCount !== undefined) {
    if (cpuCount < 1) return 'CPU count must be at least 1';
    if (cpuCount > 32) return 'CPU count must be at most 32';
    if (cpuCount !== 1 && cpuCount % 2 !== 0) return 'CPU count must be 1 or an even number';
  }
  if (memoryMB !== undefined) {
    if (memoryMB < 128) return 'Memory must be at least 128 MiB';
    if (memoryMB % 2 !== 0) return 'Memory must be divisible by 2';
  }
  return null;
}

/** E2B's reply when a team is at its concurrent sandboxes limit (HTTP 429). */
export const QUOTA_MESSAGE =
  "You have reached the maximum number of concurrent E2B sandboxes (20). If you need more, please contact us at 'https://e2b.dev/docs/getting-help'";

export async function serveApi(state: ApiState, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const url = new URL(req.url ?? '/', state.baseUrl);
  const route = `${req.method} ${url.pathname}`;
  let match: RegExpExecArray | null;
  // Upload links are presigned: no API key.
  if ((match = /^PUT \/_uploads\/([^/]+)$/.exec(route))) {
    state.templates.upload(decodeURIComponent(match[1]!), await readBody(req));
    return sendJson(res, 200, {});
  }
  if (req.headers['x-api-key'] !== state.apiKey) return sendApiError(res, 401, 'Invalid API key');
  if (route === 'POST /v2/sandboxes') return createSandbox(state, req, res);
  if (route === 'GET /v2/sandboxes') {
    // The SDK encodes each key and value, then the pairs as a query string, in the one `metadata` parameter.
    const wanted = [...new URLSearchParams(url.searchParams.get('metadata') ?? '')].map(
      ([key, value]) => [decodeURIComponent(key), decodeURIComponent(value)] as const
    );
    const listed = [...state.sandboxes.byId.values()].filter((sandbox) =>
      wanted.every(([key, value]) => sandbox.metadata[key] === value)
    );
    return sendJson(
      res,
      200,
      listed.map((sandbox) => state.sandboxes.listed(sandbox))
    );
  }
  if ((match = /^(GET|DELETE) \/sandboxes\/([^/]+)$/.exec(route))) {
    const sandbox = state.sandboxes.byId.get(match[2]!);
    if (!sandbox) return sendApiError(res, 404, `sandbox "${match[2]}" doesn't exist or you don't have access to it`);
    if (match[1] === 'GET') return sendJson(res, 200, state.sandboxes.listed(sandbox));
    await state.sandboxes.kill(sandbox.sandboxID);
    return sendEmpty(res, 204);
  }
  if ((match = /^POST \/v2\/sandboxes\/([^/]+)\/connect$/.exec(route))) {
    const sandbox = state.sandboxes.byId.get(match[1]!);
    const body = await readJson<{ timeout?: number }>(req);
    if (!sandbox) return sendApiError(res, 404, `sandbox "${match[1]}" doesn't exist`);
    if (body.timeout) state.sandboxes.setTimeout(sandbox, body.timeout);
    return sendJson(res, 200, created(sandbox));
  }
  if ((match = /^PUT \/sandboxes\/([^/]+)\/network$/.exec(route))) {
    const sandbox = state.sandboxes.byId.get(match[1]!);
    const body = await readJson<{ allow_internet_access?: boolean }>(req);
    if (!sandbox) return sendApiError(res, 404, `sandbox "${match[1]}" doesn't exist`);
    await state.sandboxes.setInternetAccess(sandbox, body.allow_internet_access !== false);
    return sendEmpty(res, 204);
  }
  if ((match = /^POST \/sandboxes\/([^/]+)\/snapshots$/.exec(route))) {
    const sandbox = state.sandboxes.byId.get(match[1]!);
    const body = await readJson<{ name?: string }>(req);
    if (!sandbox) return sendApiError(res, 404, `sandbox "${match[1]}" doesn't exist`);
    const snapshot = await state.templates.snapshot(sandbox.template, sandbox.containerId, body.name);
    return sendJson(res, 201, { snapshotID: snapshot.templateID, names: [`${snapshot.name}:default`] });
  }
  if (route === 'GET /snapshots') {
    const snapshots = [...state.templates.byId.values()].filter((t) => t.snapshot);
    return sendJson(
      res,
      200,
      snapshots.map((t) => ({ snapshotID: t.templateID, names: [`${t.name}:default`] }))
    );
  }
  if ((match = /^POST \/sandboxes\/([^/]+)\/timeout$/.exec(route))) {
    const sandbox = state.sandboxes.byId.get(match[1]!);
    const body = await readJson<{ timeout: number }>(req);
    if (!sandbox) return sendApiError(res, 404, `sandbox "${match[1]}" doesn't exist`);
    state.sandboxes.setTimeout(sandbox, body.timeout);
    return sendEmpty(res, 204);
  }
  return serveTemplates(state, req, res, url, route);
}

async function createSandbox(state: ApiState, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const body = await readJson<{
    templateID: string;
    metadata?: Record<string, string>;
    envVars?: Record<string, string>;
    timeout?: number;
  }>(req);
  if (state.failCreates > 0) {
    state.failCreates--;
    return sendApiError(res, 429, QUOTA_MESSAGE);
  }
  // The team's maximum sandbox length, checked at creation (handlers/sandbox_create.go:158, validateAndParseTimeout
  // in handlers/timeout_helper.go:30-33). The stand-in's team is on the free (Hobby) plan: 1 h.
  if ((body.timeout ?? 0) > TEAM_MAX_LENGTH_HOURS * 3600) {
    return sendApiError(res, 400, `Timeout cannot be greater than ${TEAM_MAX_LENGTH_HOURS} hours`);
  }
  const ready = state.templates.readyImage(body.templateID);
  if (!ready) return sendApiError(res, 404, `template '${body.templateID}' not found`);
  try {
    return sendJson(res, 201, created(await state.sandboxes.create(ready.template, ready.image, body)));
  } catch (err) {
    return sendApiError(res, 500, `failed to create sandbox: ${(err as Error).message}`);
  }
}

/** A sandbox as POST /v2/sandboxes and its connect call answer: what the SDK needs to reach its envd. */
function created(sandbox: SandboxRecord): unknown {
  return {
    sandboxID: sandbox.sandboxID,
    templateID: sandbox.template.templateID,
    alias: sandbox.template.name,
    clientID: 'stand-in',
    envdVersion: ENVD_VERSION,
    envdAccessToken: sandbox.envdAccessToken,
    domain: null,
  };
}

async function serveTemplates(
  state: ApiState,
  req: IncomingMessage,
  res: ServerResponse,
  url: URL,
  route: string
): Promise<void> {
  const { templates } = state;
  let match: RegExpExecArray | null;
  if (route === 'POST /v3/templates') {
    const body = await readJson<Parameters<typeof templates.request>[0]>(req);
    const invalid = templateResourceProblem(body.cpuCount, body.memoryMB);
    if (invalid) return sendApiError(res, 400, invalid);
    return sendJson(res, 202, templates.request(body));
  }
  if ((match = /^GET \/templates\/aliases\/([^/]+)$/.exec(route))) {
    const template = templates.find(decodeURIComponent(match[1]!));
    if (!template) return sendApiError(res, 404, `template alias '${match[1]}' not found`);
    return sendJson(res, 200, { templateID: template.templateID, public: false });
  }
  if (route === 'POST /templates/tags') {
    const body = await readJson<{ target: string; tags: string[] }>(req);
    const template = templates.find(body.target);
    const buildID = template?.tags.get(body.target.split(':')[1] ?? 'default');
    if (!template || !buildID) return sendApiError(res, 404, `template '${body.target}' not found`);
    for (const tag of body.tags) template.tags.set(tag, buildID);
    return sendJson(res, 201, { buildID, tags: body.tags });
  }
  if (route === 'DELETE /templates/tags') {
    const body = await readJson<{ name: string; tags: string[] }>(req);
    const template = templates.find(body.name);
    if (!template) return sendApiError(res, 404, `template '${body.name}' not found`);
    for (const tag of body.tags) template.tags.delete(tag);
    return sendEmpty(res, 204);
  }
  const id = /^\/(?:v2\/)?templates\/([^/]+)/.exec(url.pathname)?.[1];
  const template = id === undefined ? undefined : templates.find(decodeURIComponent(id));
  if (!template) return sendApiError(res, 404, `template '${id ?? url.pathname}' not found`);
  if ((match = /^GET \/templates\/[^/]+\/files\/([^/]+)$/.exec(route))) {
    const hash = match[1]!;
    const present = templates.hasUpload(hash);
    return sendJson(res, 201, { present, url: present ? undefined : `${state.baseUrl}/_uploads/${hash}` });
  }
  if ((match = /^POST \/v2\/templates\/[^/]+\/builds\/([^/]+)$/.exec(route))) {
    const body = await readJson<TemplateBody>(req);
    if (!templates.trigger(template, match[1]!, body)) return sendApiError(res, 404, `build ${match[1]} not found`);
    return sendEmpty(res, 202);
  }
  if ((match = /^GET \/templates\/[^/]+\/builds\/([^/]+)\/status$/.exec(route))) {
    const status = templates.status(template, match[1]!, Number(url.searchParams.get('logsOffset') ?? 0));
    if (!status) return sendApiError(res, 404, `build ${match[1]} not found`);
    return sendJson(res, 200, status);
  }
  if (/^GET \/templates\/[^/]+\/tags$/.test(route)) {
    return sendJson(
      res,
      200,
      [...template.tags].map(([tag, buildID]) => ({ tag, buildID, createdAt: new Date().toISOString() }))
    );
  }
  if (/^DELETE \/templates\/[^/]+$/.test(route)) {
    await templates.remove(template);
    return sendEmpty(res, 204);
  }
  return sendApiError(res, 404, `the stand-in does not serve ${route}`);
}
