/**
 * A stand-in of E2B (test/support/cloud-stand-in.ts), for the unmodified `e2b` SDK pointed at it through its own
 * settings: E2B_API_URL (the REST API: sandboxes, templates and their builds) and E2B_SANDBOX_URL (every sandbox's
 * envd, told apart by the SDK's `E2b-Sandbox-Id` header), one local HTTP server for both. Sandboxes are containers
 * of the local Docker engine, templates `docker build`s of the steps the SDK sends; both labelled with the stand-in's
 * instance, and removed by stop().
 *
 * Fidelity gaps: no Firecracker VM (a sandbox's cpus and memory are Docker limits; PID 1 is `sleep`, not E2B's init),
 * envd is a stand-in process named `envd` (killing it breaks the sandbox, as on E2B); only what the SDK's commands,
 * files and template build calls use is served (no filesystem RPC service, watch, PTY, pause or snapshots).
 */
import { randomBytes } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

import type { CloudStandIn } from '../../support/cloud-stand-in';
import type { ApiState } from './e2b-stand-in/api';
import { serveApi } from './e2b-stand-in/api';
import { serveEnvd } from './e2b-stand-in/envd';
import { Sandboxes } from './e2b-stand-in/sandboxes';
import { Templates } from './e2b-stand-in/templates';
import { sendApiError } from './e2b-stand-in/wire';
import { StandInFaults } from '../../support/stand-in-faults';

export { QUOTA_MESSAGE } from './e2b-stand-in/api';

export interface E2BStandIn extends CloudStandIn {
  /** The templates it holds, by name. */
  templateNames(): string[];
}

export async function startE2BStandIn(): Promise<E2BStandIn> {
  const label = randomBytes(4).toString('hex');
  const state: ApiState = {
    apiKey: `e2b_stand_in_${randomBytes(8).toString('hex')}`,
    baseUrl: '',
    sandboxes: new Sandboxes(label),
    templates: new Templates(label),
    failCreates: 0,
  };
  const faults = new StandInFaults();
  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    const sandboxId = req.headers['e2b-sandbox-id'];
    if (typeof sandboxId !== 'string') {
      // E2B's API answers a rate limit with 429 and its error body (`{code, message}`). envd's calls are not
      // limited here: how E2B's proxy limits them is not published (docs/e2b.md).
      if (faults.hit()) return sendApiError(res, 429, 'Rate limit exceeded, please try again later.');
      return serveApi(state, req, res);
    }
    const sandbox = state.sandboxes.byId.get(sandboxId);
    // E2B's edge proxy answers for a sandbox that is gone with 502.
    if (!sandbox) return sendApiError(res, 502, `The sandbox ${sandboxId} was not found`);
    return serveEnvd(sandbox, req, res);
  };
  let requests = 0;
  const server = createServer((req, res) => {
    handle(req, res).catch((err: Error) => {
      if (!res.headersSent) sendApiError(res, 500, err.message);
      else res.destroy(err);
    });
  });
  // ROLLOUT_STAND_IN_TRACE=1: every call on stderr (what a trial's API calls are made of).
  const trace = process.env.ROLLOUT_STAND_IN_TRACE === '1';
  server.on('request', (req: IncomingMessage) => {
    requests += 1;
    if (trace) process.stderr.write(`e2b stand-in: ${req.method} ${req.url}\n`);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  state.baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    vendor: 'e2b',
    requests: () => requests,
    env: { E2B_API_KEY: state.apiKey, E2B_API_URL: state.baseUrl, E2B_SANDBOX_URL: state.baseUrl },
    failNextCreates(count) {
      state.failCreates = count;
    },
    setFaults(given) {
      faults.set(given);
    },
    sandboxes: () => Promise.resolve([...state.sandboxes.byId.keys()]),
    templateNames: () => [...state.templates.byId.values()].map((t) => t.name),
    async stop() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await state.sandboxes.killAll();
      await state.templates.removeAll();
    },
  };
}
