/**
 * `npm run stand-in -- <vendor> --latency <ms>`: every API call to a stand-in delayed, as a real vendor's are across
 * the internet. A TCP relay in front of each local address the stand-in's environment names: what the client sends is
 * passed on `ms` later (so each call, HTTP/1 or a gRPC stream's message, reaches the stand-in `ms` late; answers come
 * back at once). Whatever the vendor's protocol: the stand-ins themselves are unchanged.
 */
import net from 'node:net';

export interface LatencyProxy {
  port: number;
  close(): Promise<void>;
}

export async function startLatencyProxy(
  target: { host: string; port: number },
  latencyMs: number
): Promise<LatencyProxy> {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(target);
    sockets.add(client).add(upstream);
    const later = (fn: () => void) => setTimeout(fn, latencyMs);
    // Timers of one duration fire in the order they were set: the bytes arrive in order.
    client.on('data', (chunk) => later(() => upstream.destroyed || upstream.write(chunk)));
    client.on('end', () => later(() => upstream.end()));
    upstream.pipe(client);
    const closeBoth = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    client.on('error', closeBoth).on('close', () => later(closeBoth));
    upstream.on('error', closeBoth).on('close', closeBoth);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as net.AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}

const LOCAL_ADDRESS = /\b(127\.0\.0\.1|localhost):(\d+)\b/g;

/**
 * A stand-in's environment with every local address it names (its API, its sandboxes' proxy) behind a latency
 * proxy; `close` stops the proxies.
 */
export async function delayedEnv(
  env: Record<string, string>,
  latencyMs: number
): Promise<{ env: Record<string, string>; close: () => Promise<void> }> {
  const proxies = new Map<string, LatencyProxy>();
  for (const value of Object.values(env)) {
    for (const [address, host, port] of value.matchAll(LOCAL_ADDRESS)) {
      if (!proxies.has(address))
        proxies.set(address, await startLatencyProxy({ host: host!, port: Number(port) }, latencyMs));
    }
  }
  const delayed = Object.fromEntries(
    Object.entries(env).map(([name, value]) => [
      name,
      value.replace(LOCAL_ADDRESS, (address, host: string) => `${host}:${proxies.get(address)!.port}`),
    ])
  );
  return { env: delayed, close: async () => void (await Promise.all([...proxies.values()].map((p) => p.close()))) };
}
