/** `rollout view`: a live web app over job folders (node's http server; pages rendered per request from disk). */
import http from 'node:http';
import type { AddressInfo } from 'node:net';

import type { TrialFilter } from './data';
import type { LinkContext } from './html';
import { NotFound, Site, readAsset, temporalUi } from './site';

function liveContext(): LinkContext {
  const ui = temporalUi();
  const encode = (segments: readonly string[]) => '/' + segments.map(encodeURIComponent).join('/');
  return {
    href(segments, query) {
      const params = new URLSearchParams();
      for (const [key, value] of Object.entries(query ?? {}))
        if (value !== undefined && value !== '') params.set(key, String(value));
      const search = params.toString();
      return encode(segments) + (search ? `?${search}` : '');
    },
    file: encode,
    asset: (name) => `/assets/${name}`,
    live: true,
    temporalUiUrl: ui.url,
    temporalNamespace: ui.namespace,
  };
}

function number(value: string | null): number | undefined {
  if (value === null || value.trim() === '') return undefined;
  const n = Number(value);
  return Number.isFinite(n) ? n : undefined;
}

function filterOf(params: URLSearchParams): TrialFilter {
  const text = (name: string) => params.get(name) || undefined;
  return {
    q: text('q'),
    task: text('task'),
    agent: text('agent'),
    error: text('error'),
    minReward: number(params.get('min')),
    maxReward: number(params.get('max')),
  };
}

export interface ViewServer {
  url: string;
  close(): Promise<void>;
}

export async function startViewServer(
  root: string,
  options: { port?: number; host?: string } = {}
): Promise<ViewServer> {
  const site = new Site(root);
  const ctx = liveContext();
  const host = options.host ?? '127.0.0.1';
  const server = http.createServer((request, response) => {
    const allowedHosts = loopbackHosts(host, (server.address() as AddressInfo).port);
    if (allowedHosts && !allowedHosts.has((request.headers.host ?? '').toLowerCase())) {
      // DNS rebinding: a web page's own host name, made to resolve to 127.0.0.1, reaches a loopback viewer.
      response.writeHead(421, { 'content-type': 'text/plain; charset=utf-8' }).end('misdirected request\n');
      return;
    }
    handle(site, ctx, request, response).catch((err: unknown) => {
      const notFound = err instanceof NotFound;
      response.writeHead(notFound ? 404 : 500, { 'content-type': 'text/html; charset=utf-8' });
      response.end(site.notFound(ctx, err instanceof Error ? err.message : String(err)));
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, host, resolve);
  });
  const { port } = server.address() as AddressInfo;
  const shownHost = host.includes(':') ? `[${host}]` : host === '0.0.0.0' ? '127.0.0.1' : host;
  return {
    url: `http://${shownHost}:${port}/`,
    close: () =>
      new Promise((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

/**
 * The Host headers a viewer on loopback answers: its own address by number or as localhost. A viewer bound to
 * another address (--host) is reachable by name from its network, and answers any.
 */
function loopbackHosts(host: string, port: number): Set<string> | undefined {
  if (!['127.0.0.1', '::1', 'localhost'].includes(host) && !host.startsWith('127.')) return undefined;
  const names = [host.includes(':') ? `[${host}]` : host, 'localhost', '127.0.0.1', '[::1]'];
  // A Host header leaves port 80 out.
  return new Set(names.flatMap((name) => (port === 80 ? [name, `${name}:80`] : [`${name}:${port}`])));
}

async function handle(site: Site, ctx: LinkContext, request: http.IncomingMessage, response: http.ServerResponse) {
  const url = new URL(request.url ?? '/', 'http://viewer');
  const segments = url.pathname
    .split('/')
    .filter(Boolean)
    .map((segment) => decodeURIComponent(segment));
  const page = (body: string) => {
    response.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' });
    response.end(body);
  };
  const [first, job, third, trial, fifth, ...rest] = segments;
  if (request.method !== 'GET' && request.method !== 'HEAD') {
    response.writeHead(405).end();
    return;
  }
  if (segments.length === 0) return page(await site.jobs(ctx));
  if (first === 'assets' && job && segments.length === 2) {
    const asset = await readAsset(job);
    if (!asset) throw new NotFound(`no asset ${job}`);
    response.writeHead(200, { 'content-type': asset.type, 'cache-control': 'max-age=3600' });
    response.end(asset.body);
    return;
  }
  if (first === 'jobs' && job && segments.length === 2) {
    return page(
      await site.job(ctx, job, {
        filter: filterOf(url.searchParams),
        page: number(url.searchParams.get('page')),
        matrixPage: number(url.searchParams.get('mpage')),
      })
    );
  }
  if (first === 'jobs' && job && third === 'trials' && trial && segments.length === 4) {
    return page(await site.trial(ctx, job, trial));
  }
  if (first === 'jobs' && job && third === 'trials' && trial && fifth === 'files' && rest.length > 0) {
    const { handle, size } = await site.openTrialFile(job, trial, rest);
    response.writeHead(200, {
      'content-type': 'application/octet-stream',
      'content-length': size,
      'content-disposition': `attachment; filename="${encodeURIComponent(rest[rest.length - 1]!)}"`,
    });
    if (size === 0 || request.method === 'HEAD') {
      await handle.close();
      response.end();
      return;
    }
    handle.createReadStream({ start: 0, end: size - 1 }).pipe(response);
    return;
  }
  if (first === 'compare' && segments.length === 1) {
    // The comparison form: a=<job>/<agent>&b=<job>/<agent> → the comparison's own deep link.
    const split = (value: string | null) => {
      const at = value?.indexOf('/') ?? -1;
      if (!value || at < 0) throw new NotFound('compare: pick two agents');
      return [value.slice(0, at), value.slice(at + 1)];
    };
    response.writeHead(302, {
      location: ctx.href(['compare', ...split(url.searchParams.get('a')), ...split(url.searchParams.get('b'))]),
    });
    response.end();
    return;
  }
  if (first === 'compare' && segments.length === 5) {
    return page(await site.compare(ctx, segments[1]!, segments[2]!, segments[3]!, segments[4]!));
  }
  throw new NotFound(`no page at ${url.pathname}`);
}
