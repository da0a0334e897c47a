/**
 * A stand-in for Fly's Machines REST API (https://fly.io/docs/machines/api/), NOT Fly: the endpoints Rollout's fly
 * provider calls, speaking Fly's wire format (JSON machines, `{"error": …}` replies, metadata filters, the wait and
 * exec endpoints), with each machine a local Docker container run as Fly runs one (an init as PID 1, the image's
 * entrypoint, `init.cmd` as its command, destroyed when its command ends with auto_destroy). Images come from a real
 * registry (CNCF distribution) on a local port, which stands in for registry.fly.io. Pointed at by the variables
 * flyctl itself reads: FLY_FLAPS_BASE_URL, FLY_REGISTRY_HOST, FLY_API_TOKEN (and FLY_APP: its one app).
 */
import { randomBytes } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { PassThrough } from 'node:stream';

import Docker from 'dockerode';

import type { CloudStandIn } from '../../support/cloud-stand-in';
import { buildImageRegistry, startImageRegistry } from '../../support/image-registry';
import { StandInFaults } from '../../support/stand-in-faults';
import { freePort } from '../../support/serve';
import { ownerLabel, removeOnExit, removeOrphanedContainers } from '../../support/stand-in-owner';

const LABEL = 'rollout.fly-stand-in';
const APP = 'rollout-stand-in';

interface Machine {
  id: string;
  container: string;
  state: 'created' | 'started' | 'stopped' | 'destroyed';
  config: Record<string, unknown> & { metadata?: Record<string, string> };
  region: string;
  created_at: string;
}

/**
 * Fly's API proxy ends a request at about 60 s: fly-go flaps/flaps_machines_wait.go:19 `proxyTimeoutThreshold = 60 *
 * time.Second` clamps every wait of its own to it, and users see 408 `deadline_exceeded` on long execs (flyctl issue
 * #4194). The stand-in answers any request still open then with that 408, whatever the exec's `timeout`.
 */
const PROXY_TIMEOUT_MS = 60_000;
/**
 * Not published by Fly: an exec's JSON body (its stdin) is bounded here so that a whole-file transfer in one body
 * fails in tests (docs/fly.md lists the probe under "to confirm on a real account").
 */
const MAX_BODY_BYTES = 8 * 2 ** 20;

/**
 * Fly's guest sizes (what its own clients refuse before the API would): shared CPUs 1/2/4/6/8, performance 1 or even
 * up to 16 (flyctl internal/machine/update.go `cpusPerKind`); memory per CPU 256–2048 MB shared, 2048–8192 MB
 * performance (fly-go machine_types.go MIN_/MAX_MEMORY_MB_PER_(SHARED_)CPU); memory a multiple of 256 MB shared,
 * 1024 MB performance (flyctl's guest flags, `memoryIncrement`). The API's own wording is not published: the
 * stand-in answers flyctl's (docs/fly.md: to confirm).
 */
function guestProblem(guest: { cpu_kind?: string; cpus?: number; memory_mb?: number }): string | null {
  const kind = guest.cpu_kind ?? 'shared';
  const cpus = guest.cpus ?? 1;
  const memory = guest.memory_mb ?? 256;
  const shared = kind === 'shared';
  if (kind !== 'shared' && kind !== 'performance') return `invalid CPU kind '${kind}'`;
  const cpuSteps = shared ? [1, 2, 4, 6, 8] : [1, 2, 4, 6, 8, 10, 12, 14, 16];
  if (!cpuSteps.includes(cpus)) return 'invalid number of CPUs';
  const [minPerCpu, maxPerCpu, step] = shared ? [256, 2048, 256] : [2048, 8192, 1024];
  if (memory < cpus * minPerCpu) {
    return `invalid config: for machines with ${cpus} CPUs, the minimum amount of memory is ${cpus * minPerCpu} MiB`;
  }
  if (memory > cpus * maxPerCpu) {
    return `invalid config: for machines with ${cpus} CPUs, the maximum amount of memory is ${cpus * maxPerCpu} MiB`;
  }
  if (memory % step !== 0) return `invalid memory size: ${memory} MiB is not a multiple of ${step} MiB`;
  return null;
}

type Reply = { status: number; body: unknown };
const reply = (status: number, body: unknown): Reply => ({ status, body });
const error = (status: number, message: string): Reply => reply(status, { error: message });

export async function startFlyStandIn(): Promise<CloudStandIn & { app: string; registry: string }> {
  const docker = new Docker();
  let registry = await startImageRegistry(await freePort());
  if (typeof registry === 'string') {
    // Self-contained: the registry binary is built on first use (Go's module proxy), as setup-tests.sh builds it.
    await buildImageRegistry();
    registry = await startImageRegistry(await freePort());
  }
  if (typeof registry === 'string') throw new Error(`fly stand-in: ${registry} (and building it failed: see above)`);
  const token = `fly-stand-in-${randomBytes(12).toString('hex')}`;
  const standInId = randomBytes(4).toString('hex');
  // Machines that killed runs of a stand-in left (their process is gone; live runs' are kept), and this run's when it
  // exits without stop().
  await removeOrphanedContainers(docker, LABEL);
  const stopWatching = removeOnExit(LABEL, standInId);
  const machines = new Map<string, Machine>();
  let failCreates = 0;
  const faults = new StandInFaults();

  const view = (m: Machine) => ({
    id: m.id,
    name: `machine-${m.id}`,
    state: m.state,
    region: m.region,
    instance_id: m.container.slice(0, 26),
    private_ip: 'fdaa::1',
    config: m.config,
    image_ref: { registry: registry.address, repository: APP, tag: String(m.config.image).split(':').pop() },
    created_at: m.created_at,
    updated_at: new Date().toISOString(),
  });

  async function ensureImage(image: string): Promise<void> {
    if (
      await docker
        .getImage(image)
        .inspect()
        .then(
          () => true,
          () => false
        )
    )
      return;
    const stream = await docker.pull(image);
    await new Promise<void>((resolve, reject) =>
      docker.modem.followProgress(stream, (err) => (err ? reject(err) : resolve()))
    );
  }

  async function create(body: { region?: string; config?: Machine['config'] }): Promise<Reply> {
    if (failCreates > 0) {
      failCreates -= 1;
      return error(429, 'rate limit exceeded: too many machines being created in this organization (stand-in)');
    }
    const config = body.config;
    if (!config || typeof config.image !== 'string') return error(400, 'config.image is required');
    try {
      await ensureImage(config.image);
    } catch (err) {
      return error(422, `failed to get manifest ${config.image}: ${(err as Error).message}`);
    }
    const guest = (config.guest ?? {}) as { cpu_kind?: string; cpus?: number; memory_mb?: number };
    const invalid = guestProblem(guest);
    if (invalid) return error(422, invalid);
    const init = (config.init ?? {}) as { cmd?: string[]; entrypoint?: string[] };
    const env = (config.env ?? {}) as Record<string, string>;
    const container = await docker.createContainer({
      Image: config.image,
      ...(init.entrypoint ? { Entrypoint: init.entrypoint } : {}),
      ...(init.cmd ? { Cmd: init.cmd } : {}),
      Env: Object.entries(env).map(([k, v]) => `${k}=${v}`),
      Labels: { [LABEL]: standInId, ...ownerLabel() },
      HostConfig: {
        Init: true,
        NanoCpus: Math.round((guest.cpus ?? 1) * 1e9),
        Memory: (guest.memory_mb ?? 256) * 2 ** 20,
      },
    });
    const id = container.id.slice(0, 14);
    const machine: Machine = {
      id,
      container: container.id,
      state: 'created',
      config,
      region: body.region ?? 'sin',
      created_at: new Date().toISOString(),
    };
    machines.set(id, machine);
    await container.start();
    machine.state = 'started';
    // Fly destroys a machine whose command ended when auto_destroy is set (the keep-alive's lifetime passed).
    void container.wait().then(
      async () => {
        if (machine.state === 'destroyed') return;
        machine.state = 'stopped';
        if (config.auto_destroy) await destroy(machine);
      },
      () => undefined
    );
    return reply(200, view(machine));
  }

  async function destroy(machine: Machine): Promise<void> {
    machine.state = 'destroyed';
    await docker
      .getContainer(machine.container)
      .remove({ force: true })
      .catch((err: { statusCode?: number }) => {
        if (err.statusCode !== 404 && err.statusCode !== 409) throw err;
      });
  }

  async function exec(machine: Machine, body: { command?: string[]; cmd?: string; stdin?: string; timeout?: number }) {
    if (machine.state !== 'started') return error(412, `machine ${machine.id} is not started (${machine.state})`);
    const command = body.command ?? (body.cmd ? ['/bin/sh', '-c', body.cmd] : null);
    if (!command) return error(400, 'command is required');
    const execution = await docker.getContainer(machine.container).exec({
      Cmd: command,
      AttachStdin: body.stdin !== undefined,
      AttachStdout: true,
      AttachStderr: true,
    });
    const stream = await execution.start({ hijack: true, stdin: body.stdin !== undefined });
    const stdout: Buffer[] = [];
    const stderr: Buffer[] = [];
    const out = new PassThrough().on('data', (c: Buffer) => stdout.push(c));
    const err = new PassThrough().on('data', (c: Buffer) => stderr.push(c));
    docker.modem.demuxStream(stream, out, err);
    if (body.stdin !== undefined) stream.end(body.stdin);
    const ended = new Promise<boolean>((resolve) => {
      stream.once('end', () => resolve(true));
      stream.once('close', () => resolve(true));
    });
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<boolean>(
      (resolve) => (timer = setTimeout(() => resolve(false), (body.timeout ?? 60) * 1000))
    );
    const finished = await Promise.race([ended, timeout]);
    clearTimeout(timer);
    if (!finished) {
      stream.destroy();
      return error(408, 'deadline_exceeded: the command ran past its timeout');
    }
    let info = await execution.inspect();
    for (let i = 0; info.Running && i < 50; i++) {
      await new Promise((resolve) => setTimeout(resolve, 20));
      info = await execution.inspect();
    }
    return reply(200, {
      exit_code: info.ExitCode,
      stdout: Buffer.concat(stdout).toString('utf8'),
      stderr: Buffer.concat(stderr).toString('utf8'),
    });
  }

  async function waitFor(machine: Machine, state: string, timeoutSec: number): Promise<Reply> {
    const deadline = Date.now() + Math.min(timeoutSec, 60) * 1000;
    while (machine.state !== state) {
      if (Date.now() > deadline) return error(408, `timed out waiting for machine to reach state ${state}`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    return reply(200, { ok: true });
  }

  async function route(method: string, url: URL, body: unknown): Promise<Reply> {
    const parts = url.pathname.split('/').filter(Boolean).map(decodeURIComponent);
    if (parts[0] !== 'v1' || parts[1] !== 'apps' || !parts[2]) return error(404, 'not found');
    if (parts[2] !== APP) return error(404, `app not found: ${parts[2]}`);
    if (parts.length === 3 && method === 'GET') {
      return reply(200, { name: APP, organization: { slug: 'personal' }, status: 'deployed' });
    }
    if (parts[3] !== 'machines') return error(404, 'not found');
    if (parts.length === 4 && method === 'POST') return create(body as Parameters<typeof create>[0]);
    if (parts.length === 4 && method === 'GET') {
      const filters = [...url.searchParams].filter(([key]) => key.startsWith('metadata.'));
      const listed = [...machines.values()].filter(
        (m) => m.state !== 'destroyed' && filters.every(([key, value]) => m.config.metadata?.[key.slice(9)] === value)
      );
      return reply(200, listed.map(view));
    }
    const machine = machines.get(parts[4] ?? '');
    if (!machine) return error(404, `machine not found: ${parts[4]}`);
    const action = parts[5];
    if (!action && method === 'GET') return reply(200, view(machine));
    if (!action && method === 'DELETE') {
      if (machine.state === 'started' && url.searchParams.get('force') !== 'true') {
        return error(412, 'machine still active, refusing to delete');
      }
      await destroy(machine);
      return reply(200, { ok: true });
    }
    if (action === 'wait' && method === 'GET') {
      return waitFor(
        machine,
        url.searchParams.get('state') ?? 'started',
        Number(url.searchParams.get('timeout') ?? 60)
      );
    }
    if (action === 'exec' && method === 'POST') return exec(machine, body as Parameters<typeof exec>[1]);
    if (action === 'stop' && method === 'POST') {
      await docker
        .getContainer(machine.container)
        .stop({ t: 0 })
        .catch(() => undefined);
      machine.state = 'stopped';
      return reply(200, { ok: true });
    }
    return error(404, 'not found');
  }

  let requests = 0;
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    let bodyBytes = 0;
    const send = ({ status, body }: Reply) => {
      clearTimeout(proxyCut);
      if (res.headersSent) return;
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(body));
    };
    const proxyCut = setTimeout(() => send(error(408, 'deadline_exceeded')), PROXY_TIMEOUT_MS);
    req.on('data', (c: Buffer) => {
      bodyBytes += c.length;
      if (bodyBytes <= MAX_BODY_BYTES) chunks.push(c);
    });
    req.on('end', () => {
      if (bodyBytes > MAX_BODY_BYTES) return send(error(413, 'request body too large'));
      if (req.headers.authorization !== `Bearer ${token}`) return send(error(401, 'unauthorized'));
      // Fly's rate limits are per action and per machine; its reply's wording is not published (docs/fly.md).
      if (faults.hit()) return send(error(429, 'rate limit exceeded'));
      const text = Buffer.concat(chunks).toString('utf8');
      let body: unknown;
      try {
        body = text ? JSON.parse(text) : undefined;
      } catch {
        return send(error(400, 'invalid JSON body'));
      }
      route(req.method ?? 'GET', new URL(req.url ?? '/', 'http://stand-in'), body).then(send, (err: Error) =>
        send(error(500, err.message))
      );
    });
  });
  server.on('request', () => (requests += 1));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;

  return {
    vendor: 'fly',
    requests: () => requests,
    app: APP,
    registry: registry.address,
    env: {
      FLY_API_TOKEN: token,
      FLY_FLAPS_BASE_URL: `http://127.0.0.1:${port}`,
      FLY_REGISTRY_HOST: registry.address,
      FLY_APP: APP,
    },
    failNextCreates(count) {
      failCreates = count;
    },
    setFaults(given) {
      faults.set(given);
    },
    async sandboxes() {
      const containers = await docker.listContainers({ all: true, filters: { label: [`${LABEL}=${standInId}`] } });
      return containers.map((c) => c.Id);
    },
    async stop() {
      stopWatching();
      server.close();
      server.closeAllConnections();
      const containers = await docker.listContainers({ all: true, filters: { label: [`${LABEL}=${standInId}`] } });
      for (const c of containers)
        await docker
          .getContainer(c.Id)
          .remove({ force: true })
          .catch(() => undefined);
      // The images it pulled from its registry (the pushes of Rollout's builds).
      for (const image of await docker.listImages()) {
        const tags = (image.RepoTags ?? []).filter((tag) => tag.startsWith(`${registry.address}/`));
        for (const tag of tags)
          await docker
            .getImage(tag)
            .remove()
            .catch(() => undefined);
      }
      await registry.stop();
    },
  };
}
