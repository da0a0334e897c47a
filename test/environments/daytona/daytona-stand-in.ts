/**
 * A stand-in of Daytona's API, for tests and `npm run stand-in -- daytona`: not Daytona, but the wire protocol the
 * unmodified @daytonaio/sdk speaks, at an address its own configuration points at (DAYTONA_API_URL), its sandboxes
 * containers of the local Docker engine (test/environments/daytona/daytona-stand-in/). One HTTP server serves
 * - `/api/...`: the REST API (sandboxes, snapshots, object storage push access), bearer-authenticated;
 * - `/toolbox/<sandbox id>/...`: the sandbox daemon's toolbox API, as the toolbox proxy URL the API names;
 * - `/s3/...`: the S3-compatible object storage that build contexts are pushed to;
 * - `/api/socket.io/`: the notification gateway the SDK listens on by default (Socket.IO over WebSocket only, as
 *   apps/api/src/notification/gateways/notification.gateway.ts serves it): a socket without the key in its
 *   handshake's `auth.token` is refused; an accepted one joins its organization's room, which hears
 *   `sandbox.created` (the sandbox) and `sandbox.state.updated` ({ sandbox, oldState, newState }) on every change.
 *
 * Fidelity gaps: sandboxes start at once (no `starting` state, no runner
 * scheduling); auto-stop, auto-delete and TTL intervals are recorded, not enforced; no regions, quotas but the one
 * failNextCreates answers with, or PTYs.
 */
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

import { Server as SocketServer } from 'socket.io';

import type { CloudStandIn } from '../../support/cloud-stand-in';
import { DEFAULT_LIMITS, DaytonaApi, ORGANIZATION } from './daytona-stand-in/api';
import { ObjectStorage } from './daytona-stand-in/object-storage';
import { Runner } from './daytona-stand-in/runner';
import { Toolbox, json } from './daytona-stand-in/toolbox';
import { StandInFaults } from '../../support/stand-in-faults';

export interface DaytonaStandIn extends CloudStandIn {
  readonly vendor: 'daytona';
  /** Sockets the notification gateway accepted, and the sandbox events it sent them, so far. */
  notifications(): { sockets: number; events: number };
  /** The create requests' and sandboxes' records as the API holds them (labels, resources, intervals). */
  sandboxRecords(): Record<string, unknown>[];
}

export async function startDaytonaStandIn(): Promise<DaytonaStandIn> {
  const instance = randomBytes(4).toString('hex');
  const apiKey = `stand-in-${randomBytes(12).toString('hex')}`;
  const runner = new Runner(instance);
  const storage = new ObjectStorage();
  let baseUrl = '';
  const api = new DaytonaApi(runner, storage, () => baseUrl);
  const toolbox = new Toolbox(runner, (id) => {
    const record = api.sandboxes.get(id);
    return record?.dto.state === 'started' ? (record.containerId ?? undefined) : undefined;
  });
  const faults = new StandInFaults();
  const authorized = (header: string | undefined) => header === `Bearer ${apiKey}`;
  let requests = 0;
  const server = createServer((request, response) => {
    const url = new URL(request.url ?? '/', 'http://stand-in');
    const serve = async () => {
      if (url.pathname.startsWith('/s3/'))
        return storage.handle(request, response, url.pathname.slice(3), url.searchParams);
      if (!authorized(request.headers.authorization)) {
        return json(response, 401, { statusCode: 401, error: 'Unauthorized', message: 'Invalid credentials' });
      }
      // The API's throttlers (apps/api/src/config/configuration.ts:246-283) answer as @nestjs/throttler does.
      if (faults.hit()) {
        return json(response, 429, { statusCode: 429, message: 'ThrottlerException: Too Many Requests' });
      }
      if (url.pathname.startsWith('/api/'))
        return api.handle(request, response, url.pathname.slice(4), url.searchParams);
      if (url.pathname.startsWith('/toolbox/')) return toolbox.handle(request, response, url.pathname.slice(8));
      return json(response, 404, { statusCode: 404, message: `no route ${url.pathname}` });
    };
    serve().catch((err: Error) => {
      if (!response.headersSent) json(response, 500, { statusCode: 500, message: err.message });
      else response.destroy(err);
    });
  });
  // A toolbox WebSocket is one call too, however many frames it then carries.
  server.on('request', () => (requests += 1)).on('upgrade', () => (requests += 1));
  const gateway = notificationGateway(server, apiKey);
  api.notify = (event, payload) => gateway.emit(event, payload);
  server.on('upgrade', (request, socket, head) => {
    const url = new URL(request.url ?? '/', 'http://stand-in');
    if (url.pathname.startsWith(NOTIFICATIONS_PATH)) return; // Socket.IO's own upgrade listener answers it.
    if (!authorized(request.headers.authorization) || !url.pathname.startsWith('/toolbox/')) {
      socket.end('HTTP/1.1 404 Not Found\r\n\r\n');
      return;
    }
    toolbox.upgrade(request, socket, head, url.pathname.slice(8));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

  return {
    vendor: 'daytona',
    requests: () => requests,
    env: {
      DAYTONA_API_KEY: apiKey,
      DAYTONA_API_URL: `${baseUrl}/api`,
      DAYTONA_TARGET: 'us',
    },
    notifications: () => gateway.counts(),
    failNextCreates(count) {
      api.failCreates = count;
    },
    setFaults(given) {
      faults.set(given);
    },
    async retireImages(how) {
      if (how === 'inactive') api.deactivateSnapshots();
      else await api.deleteSnapshots();
    },
    lastingQuota(on) {
      api.limits.snapshotQuota = on ? 0 : DEFAULT_LIMITS.snapshotQuota;
    },
    sandboxes: () => Promise.resolve([...api.sandboxes.keys()]),
    sandboxRecords: () => [...api.sandboxes.values()].map(({ dto }) => ({ ...dto })),
    async stop() {
      server.closeAllConnections();
      await gateway.close(); // Socket.IO's close ends its sockets, then closes the HTTP server too.
      await runner.removeAll();
    },
  };
}

const NOTIFICATIONS_PATH = '/api/socket.io/';

/** The API's notification gateway on the stand-in's server: key-authenticated sockets in their organization's room. */
function notificationGateway(server: ReturnType<typeof createServer>, apiKey: string) {
  const io = new SocketServer(server, { path: NOTIFICATIONS_PATH, transports: ['websocket'], serveClient: false });
  let sockets = 0;
  let events = 0;
  io.use((socket, next) => {
    // Daytona's gateway verifies the token and refuses the socket without one; an API key speaks for its organization.
    if ((socket.handshake.auth as { token?: unknown }).token !== apiKey) return next(new Error('Unauthorized'));
    const asked = socket.handshake.query.organizationId;
    if (asked !== undefined && asked !== ORGANIZATION) return next(new Error('Unauthorized'));
    void socket.join(ORGANIZATION);
    sockets += 1;
    next();
  });
  return {
    emit(event: string, payload: unknown) {
      events += io.sockets.adapter.rooms.get(ORGANIZATION)?.size ?? 0;
      io.to(ORGANIZATION).emit(event, payload);
    },
    counts: () => ({ sockets, events }),
    close: () => new Promise<void>((resolve) => void io.close(() => resolve())),
  };
}
