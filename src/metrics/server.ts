/**
 * `rollout worker --metrics-port N`: `/healthz` (the process runs), `/readyz` (connected to Temporal and polling, not
 * draining) and `/metrics` (Prometheus text: the Temporal SDK's worker metrics, which its core serves on a loopback
 * port of its own, followed by Rollout's, src/metrics/rollout-metrics.ts).
 */
import http from 'node:http';
import net from 'node:net';

import { metricsRegistry } from './rollout-metrics';

export interface MetricsServerOptions {
  host: string;
  port: number;
  /** Where the SDK's core exporter serves its text (`http://127.0.0.1:<port>/metrics`), or null. */
  sdkMetricsUrl: string | null;
  /** Null when ready; else why not (one line, shown in the 503's body). */
  notReady(): Promise<string | null>;
}

export interface MetricsServer {
  url: string;
  close(): Promise<void>;
}

const SDK_SCRAPE_TIMEOUT_MS = 5_000;

export async function startMetricsServer(options: MetricsServerOptions): Promise<MetricsServer> {
  const server = http.createServer((req, res) => {
    void answer(options, req.url ?? '/').then(
      ({ status, type, body }) => {
        res.writeHead(status, { 'content-type': type, 'cache-control': 'no-store' });
        res.end(req.method === 'HEAD' ? undefined : body);
      },
      (err: unknown) => {
        res.writeHead(500, { 'content-type': 'text/plain' });
        res.end(`${(err as Error).message}\n`);
      }
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, options.host, () => resolve());
  });
  const { port } = server.address() as net.AddressInfo;
  const shown = options.host.includes(':') ? `[${options.host}]` : options.host;
  return {
    url: `http://${shown === '0.0.0.0' ? '127.0.0.1' : shown}:${port}`,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

async function answer(
  options: MetricsServerOptions,
  url: string
): Promise<{ status: number; type: string; body: string }> {
  const route = url.split('?')[0];
  if (route === '/healthz') return { status: 200, type: 'text/plain', body: 'ok\n' };
  if (route === '/readyz') {
    const reason = await options.notReady();
    return reason === null
      ? { status: 200, type: 'text/plain', body: 'ready\n' }
      : { status: 503, type: 'text/plain', body: `not ready: ${reason}\n` };
  }
  if (route === '/metrics') {
    const [sdk, own] = await Promise.all([sdkMetrics(options.sdkMetricsUrl), metricsRegistry.metrics()]);
    return { status: 200, type: metricsRegistry.contentType, body: `${sdk}${own}` };
  }
  return { status: 404, type: 'text/plain', body: 'not found: /healthz, /readyz, /metrics\n' };
}

/** The SDK's metrics text; when its exporter does not answer, a comment saying so (Rollout's still follow). */
async function sdkMetrics(url: string | null): Promise<string> {
  if (!url) return '';
  try {
    const response = await fetch(url, { signal: AbortSignal.timeout(SDK_SCRAPE_TIMEOUT_MS) });
    if (!response.ok) return `# temporal sdk metrics unavailable: HTTP ${response.status}\n`;
    const text = await response.text();
    return text.endsWith('\n') || text === '' ? text : `${text}\n`;
  } catch (err) {
    return `# temporal sdk metrics unavailable: ${(err as Error).message}\n`;
  }
}

/** A free loopback port for the SDK's exporter (it takes an address, not an open socket). */
export function freeLoopbackPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = net.createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as net.AddressInfo;
      probe.close(() => resolve(port));
    });
  });
}
