/**
 * A plain HTTP forward proxy (absolute-URI requests and CONNECT tunnels) on a host address, for pods of the local
 * cluster (scripts/k8s-cluster.sh): it adds no NAT rule to the host, so its pods reach only the host itself, and
 * through this proxy the registries an agent installs from. Real proxying, no stand-in: every byte goes to the
 * real destination.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createServer, request as httpRequest } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { connect } from 'node:net';

export interface EgressProxy {
  /** http://host:port, for HTTP_PROXY and HTTPS_PROXY. */
  url: string;
  /** Destinations reached so far (host:port), in order. */
  destinations: string[];
  close(): Promise<void>;
}

export async function startEgressProxy(host: string): Promise<EgressProxy> {
  const destinations: string[] = [];
  const sockets = new Set<Socket>();
  const track = (socket: Socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  };
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    let target: URL;
    try {
      target = new URL(req.url ?? '');
    } catch {
      res.writeHead(400).end('a forward proxy takes absolute URLs');
      return;
    }
    destinations.push(target.host);
    const upstream = httpRequest(
      target,
      { method: req.method, headers: { ...req.headers, host: target.host } },
      (answer: IncomingMessage) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      }
    );
    upstream.on('error', (err: Error) => {
      if (!res.headersSent) res.writeHead(502).end(`proxy: ${err.message}`);
      else res.destroy();
    });
    req.pipe(upstream);
  });
  server.on('connection', track);
  server.on('connect', (req: IncomingMessage, client: Socket, head: Buffer) => {
    const [name, port] = (req.url ?? '').split(':');
    destinations.push(req.url ?? '');
    const upstream = connect(Number(port) || 443, name ?? '', () => {
      client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
      upstream.write(head);
      upstream.pipe(client);
      client.pipe(upstream);
    });
    track(upstream);
    upstream.on('error', () => client.destroy());
    client.on('error', () => upstream.destroy());
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, host, () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://${host}:${port}`,
    destinations,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}
