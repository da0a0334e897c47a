/**
 * A Unix socket in front of the real Docker daemon that fails the API requests a test picks (HTTP 500, as a daemon
 * in trouble answers) and passes every other byte through: a worker given it as DOCKER_HOST meets a daemon that
 * fails some steps, while the containers are real.
 */
import net from 'node:net';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';

const DOCKER_SOCKET = '/var/run/docker.sock';

export interface FaultyDocker {
  /** DOCKER_HOST for the worker. */
  dockerHost: string;
  /** Requests answered with a fault so far, by request line. */
  failed: string[];
  close(): Promise<void>;
}

export async function faultyDocker(fails: (requestLine: string) => boolean): Promise<FaultyDocker> {
  const socket = path.join(await mkdtemp(path.join(tmpdir(), 'rollout-docker-proxy-')), 'docker.sock');
  const failed: string[] = [];
  const connections = new Set<net.Socket>();
  const server = net.createServer((client) => {
    connections.add(client);
    client.once('close', () => connections.delete(client));
    const daemon = net.connect(DOCKER_SOCKET);
    connections.add(daemon);
    daemon.once('close', () => connections.delete(daemon));
    daemon.on('error', () => client.destroy());
    client.on('error', () => daemon.destroy());
    daemon.pipe(client);
    client.on('data', (chunk: Buffer) => {
      // Each request on a kept-alive connection starts a chunk with its request line.
      const requestLine = /^(GET|POST|PUT|DELETE|HEAD) \S+/.exec(chunk.toString('latin1', 0, 512))?.[0];
      if (requestLine && fails(requestLine)) {
        failed.push(requestLine);
        const body = JSON.stringify({ message: 'injected daemon fault' });
        client.end(
          `HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`
        );
        daemon.destroy();
        return;
      }
      daemon.write(chunk);
    });
    client.once('end', () => daemon.end());
  });
  await new Promise<void>((resolve) => server.listen(socket, resolve));
  return {
    dockerHost: `unix://${socket}`,
    failed,
    close: () =>
      new Promise<void>((resolve) => {
        for (const connection of connections) connection.destroy();
        server.close(() => resolve());
      }),
  };
}
