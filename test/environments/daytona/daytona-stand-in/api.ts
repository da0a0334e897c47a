/**
 * The Daytona stand-in's REST API (what @daytonaio/sdk's generated clients call under DAYTONA_API_URL): sandboxes
 * (create from a snapshot or a build, get, list by labels, stop, start, delete, the toolbox proxy URL, a snapshot of
 * a sandbox), snapshots (create from an image name or a build, get, list, delete) and object storage push access.
 * Errors as the API's exception filter writes them: `{ path, timestamp, statusCode, error, message }`.
 */
import { createHash, randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { STATUS_CODES } from 'node:http';

import type { ObjectStorage } from './object-storage';
import type { Runner } from './runner';
import { body, json } from './toolbox';

export const ORGANIZATION = 'stand-in-organization';

/**
 * An organization's limits, as the open-source API's defaults set them (apps/api/src/config/configuration.ts:292-299:
 * maxCpuPerSandbox 4, maxMemoryPerSandbox 8, maxDiskPerSandbox 10, snapshotQuota 30), and a snapshot or sandbox has
 * at most 1 GPU (dto/create-snapshot.dto.ts:72 and create-sandbox.dto.ts:131, `@Max(1)`). Daytona Cloud's tiers may
 * differ (docs/daytona.md: to confirm).
 */
export interface DaytonaLimits {
  maxCpuPerSandbox: number;
  maxMemoryPerSandbox: number;
  maxDiskPerSandbox: number;
  snapshotQuota: number;
}
export const DEFAULT_LIMITS: DaytonaLimits = {
  maxCpuPerSandbox: 4,
  maxMemoryPerSandbox: 8,
  maxDiskPerSandbox: 10,
  snapshotQuota: 30,
};
/** What the API appends to a per-sandbox limit's message (PER_SANDBOX_LIMIT_MESSAGE). */
const PER_SANDBOX_LIMIT_MESSAGE = "To increase per-sandbox limits, upgrade your organization's Tier";

/**
 * An image name as snapshot.service.ts validateImageName takes it: a tag or a digest, not `:latest`, and
 * IMAGE_NAME_REGEX; null when valid.
 */
function imageNameProblem(name: string): string | null {
  if (name.includes('@sha256:')) {
    const [image, digest] = name.split('@sha256:');
    return image && digest && /^[a-f0-9]{64}$/.test(digest)
      ? null
      : 'Invalid digest format. Must be image@sha256:64_hex_characters';
  }
  if (!name.includes(':') || name.endsWith(':')) {
    return 'Image name must include a tag (e.g., ubuntu:22.04) or digest (@sha256:...)';
  }
  if (name.endsWith(':latest')) return 'Images with tag ":latest" are not allowed';
  if (!/^[a-zA-Z0-9_.\-:]+(\/[a-zA-Z0-9_.\-:]+)*$/.test(name)) {
    return 'Invalid image name format. Must be lowercase, may contain digits, dots, dashes, and single slashes between components';
  }
  return null;
}
export const BUCKET = 'daytona-volume-builds';

/** The fields of create requests the stand-in reads (the SDK's CreateSandbox and CreateSnapshot). */
interface CreateBody {
  name?: string;
  snapshot?: string;
  imageName?: string;
  user?: string;
  target?: string;
  env?: Record<string, string>;
  labels?: Record<string, string>;
  buildInfo?: BuildInfo;
  cpu?: number;
  memory?: number;
  disk?: number;
  gpu?: number;
  networkBlockAll?: boolean;
  autoStopInterval?: number;
  autoArchiveInterval?: number;
  autoDeleteInterval?: number;
  ttlMinutes?: number;
}

interface BuildInfo {
  dockerfileContent: string;
  contextHashes?: string[];
}

export interface SandboxRecord {
  dto: Record<string, unknown> & { id: string; state: string; labels: Record<string, string> };
  containerId: string | null;
}

interface SnapshotRecord {
  dto: Record<string, unknown> & { id: string; name: string; state: string };
  image: string | null;
  /** Its build's log, once the build has ended (a snapshot of a sandbox has none). */
  log?: Promise<string>;
}

export class DaytonaApi {
  readonly sandboxes = new Map<string, SandboxRecord>();
  private readonly snapshots = new Map<string, SnapshotRecord>();
  /** Images built from build info, by its hash: Daytona builds one build info once. */
  private readonly builds = new Map<string, Promise<{ ok: boolean; log: string; image: string }>>();
  failCreates = 0;
  limits: DaytonaLimits = { ...DEFAULT_LIMITS };

  /** The notification gateway's emit (Socket.IO), told of every sandbox created and every state it moves to. */
  notify: (event: 'sandbox.created' | 'sandbox.state.updated', payload: unknown) => void = () => undefined;

  constructor(
    private readonly runner: Runner,
    private readonly storage: ObjectStorage,
    private readonly baseUrl: () => string
  ) {}

  /**
   * What Daytona does to snapshots unused for 14 days (snapshot.manager.ts:1370-1403,
   * DEFAULT_SNAPSHOT_DEACTIVATION_TIMEOUT_MINUTES): every active snapshot becomes `inactive`. For tests.
   */
  deactivateSnapshots(): number {
    let count = 0;
    for (const { dto } of this.snapshots.values()) {
      if (dto.state === 'active') {
        dto.state = 'inactive';
        count += 1;
      }
    }
    return count;
  }

  /** Deletes every snapshot (another job released them). For tests. */
  async deleteSnapshots(): Promise<void> {
    for (const id of [...this.snapshots.keys()]) await this.removeSnapshot(id);
  }

  /** The per-sandbox maximum (sandbox.service.ts and snapshot.service.ts validateOrganizationQuotas, HTTP 403). */
  private perSandboxProblem(cpu: number, memory: number, disk: number): string | null {
    const { maxCpuPerSandbox, maxMemoryPerSandbox, maxDiskPerSandbox } = this.limits;
    if (cpu > maxCpuPerSandbox) {
      return `CPU request ${cpu} exceeds maximum allowed per sandbox (${maxCpuPerSandbox}).\n${PER_SANDBOX_LIMIT_MESSAGE}`;
    }
    if (memory > maxMemoryPerSandbox) {
      return `Memory request ${memory}GB exceeds maximum allowed per sandbox (${maxMemoryPerSandbox}GB).\n${PER_SANDBOX_LIMIT_MESSAGE}`;
    }
    if (disk > maxDiskPerSandbox) {
      return `Disk request ${disk}GB exceeds maximum allowed per sandbox (${maxDiskPerSandbox}GB).\n${PER_SANDBOX_LIMIT_MESSAGE}`;
    }
    return null;
  }

  private async removeSnapshot(id: string): Promise<void> {
    const snapshot = this.snapshots.get(id);
    if (!snapshot) return;
    this.snapshots.delete(id);
    // Snapshots of one Dockerfile share a local build (see build()): it goes with the last of them, as each
    // snapshot on Daytona is its own.
    const image = snapshot.image;
    if (image && ![...this.snapshots.values()].some((other) => other.image === image)) {
      for (const [hash, build] of this.builds) if ((await build).image === image) this.builds.delete(hash);
      await this.runner.docker.getImage(image).remove({ force: true });
    }
  }

  async handle(request: IncomingMessage, response: ServerResponse, route: string, query: URLSearchParams) {
    const method = request.method ?? 'GET';
    const fail = (status: number, message: string) =>
      json(response, status, {
        path: request.url,
        timestamp: new Date().toISOString(),
        statusCode: status,
        error: STATUS_CODES[status],
        message,
      });
    if (method === 'GET' && route === '/object-storage/push-access') {
      return json(response, 200, {
        accessKey: 'stand-in',
        secret: 'stand-in',
        sessionToken: 'stand-in',
        storageUrl: `${this.baseUrl()}/s3`,
        organizationId: ORGANIZATION,
        bucket: BUCKET,
        region: 'us-east-1',
      });
    }
    if (method === 'POST' && route === '/sandbox') {
      if (this.failCreates > 0) {
        this.failCreates -= 1;
        // What the API answers when an organization's region quota is used up (sandbox.service.ts).
        return fail(
          400,
          "Total CPU limit exceeded. Maximum allowed: 4.\nTo increase concurrency limits, upgrade your organization's Tier"
        );
      }
      return this.createSandbox((await body(request)) as CreateBody, response, fail);
    }
    if (method === 'GET' && route === '/sandbox') {
      const labels = JSON.parse(query.get('labels') ?? '{}') as Record<string, string>;
      const items = [...this.sandboxes.values()]
        .filter(({ dto }) => Object.entries(labels).every(([key, value]) => dto.labels[key] === value))
        .map(({ dto }) => dto);
      return json(response, 200, { items, nextCursor: null });
    }
    if (method === 'POST' && route === '/snapshots')
      return this.createSnapshot((await body(request)) as CreateBody, response, fail);
    if (method === 'GET' && route === '/snapshots') {
      const items = [...this.snapshots.values()].map(({ dto }) => dto);
      return json(response, 200, { items, total: items.length, page: 1, totalPages: 1 });
    }
    const snapshotMatch = /^\/snapshots\/([^/]+)(\/build-logs-url|\/build-logs|\/activate)?$/.exec(route);
    if (snapshotMatch) {
      const snapshot = this.snapshotOf(decodeURIComponent(snapshotMatch[1]!));
      if (!snapshot) return fail(404, `Snapshot ${snapshotMatch[1]} not found`);
      if (method === 'GET' && snapshotMatch[2] === '/build-logs-url') {
        return json(response, 200, { url: `${this.baseUrl()}/api/snapshots/${snapshot.dto.id}/build-logs` });
      }
      if (method === 'GET' && snapshotMatch[2] === '/build-logs') {
        // Followed to the build's end (the whole log then: the stand-in's builder does not stream it).
        response.writeHead(200, { 'Content-Type': 'text/plain' });
        response.end((await snapshot.log) ?? '');
        return;
      }
      if (method === 'POST' && snapshotMatch[2] === '/activate') {
        // snapshot.service.ts activateSnapshot: only an inactive snapshot, within the snapshot quota.
        if (snapshot.dto.state === 'active') return fail(400, `Snapshot ${snapshot.dto.id} is already active`);
        if (snapshot.dto.state !== 'inactive') {
          return fail(400, `Snapshot ${snapshot.dto.id} cannot be activated - it is in ${snapshot.dto.state} state`);
        }
        const quota = this.snapshotQuotaProblem();
        if (quota) return fail(403, quota);
        snapshot.dto.state = 'active';
        snapshot.dto.lastUsedAt = new Date().toISOString();
        return json(response, 200, snapshot.dto);
      }
      if (method === 'GET') return json(response, 200, snapshot.dto);
      if (method === 'DELETE') {
        await this.removeSnapshot(snapshot.dto.id);
        return json(response, 200, undefined);
      }
    }
    const sandboxMatch = /^\/sandbox\/([^/]+)(?:\/([a-z-]+))?$/.exec(route);
    const sandbox = sandboxMatch && this.sandboxOf(decodeURIComponent(sandboxMatch[1]!));
    if (!sandbox) return fail(404, `Sandbox with ID or name ${sandboxMatch?.[1] ?? route} not found`);
    const action = sandboxMatch[2];
    if (method === 'GET' && !action) return json(response, 200, sandbox.dto);
    if (method === 'GET' && action === 'toolbox-proxy-url')
      return json(response, 200, { url: `${this.baseUrl()}/toolbox` });
    if (method === 'DELETE' && !action) {
      if (sandbox.containerId) await this.runner.remove(sandbox.containerId);
      this.sandboxes.delete(sandbox.dto.id);
      this.moveTo(sandbox, 'destroyed');
      return json(response, 200, sandbox.dto);
    }
    if (method === 'POST' && action === 'stop' && sandbox.containerId) {
      await this.runner.stop(sandbox.containerId);
      this.moveTo(sandbox, 'stopped');
      return json(response, 200, sandbox.dto);
    }
    if (method === 'POST' && action === 'start' && sandbox.containerId) {
      await this.runner.startAgain(sandbox.containerId);
      this.moveTo(sandbox, 'started');
      return json(response, 200, sandbox.dto);
    }
    if (method === 'POST' && action === 'network-settings' && sandbox.containerId) {
      // Outbound traffic blocked: the container leaves Docker's bridge (its toolbox, through docker exec, stays).
      const { networkBlockAll } = (await body(request)) as { networkBlockAll?: boolean };
      if (networkBlockAll !== undefined && networkBlockAll !== sandbox.dto.networkBlockAll) {
        await this.runner.setNetwork(sandbox.containerId, !networkBlockAll);
        sandbox.dto.networkBlockAll = networkBlockAll;
      }
      return json(response, 200, sandbox.dto);
    }
    if (method === 'POST' && action === 'snapshot' && sandbox.containerId) {
      const { name } = (await body(request)) as { name: string };
      if (this.snapshotOf(name)) return fail(409, `Snapshot with name ${name} already exists`);
      const id = randomUUID();
      const [repo, tag] = [`daytona-stand-in-${this.runner.instance}`, id];
      await this.runner.docker.getContainer(sandbox.containerId).commit({
        repo,
        tag,
        changes: [
          `LABEL ${Object.entries(this.runner.labels)
            .map(([k, v]) => `${k}=${v}`)
            .join(' ')}`,
        ],
      });
      this.addSnapshot(
        id,
        name,
        { cpu: sandbox.dto.cpu, memory: sandbox.dto.memory, disk: sandbox.dto.disk, gpu: sandbox.dto.gpu },
        'active',
        `${repo}:${tag}`
      );
      return json(response, 200, sandbox.dto);
    }
    return fail(404, `Cannot ${method} ${route}`);
  }

  private sandboxOf(idOrName: string): SandboxRecord | undefined {
    return this.sandboxes.get(idOrName) ?? [...this.sandboxes.values()].find(({ dto }) => dto.name === idOrName);
  }

  /** The organization's snapshot quota (snapshot.service.ts validateOrganizationQuotas): inactive ones not counted. */
  private snapshotQuotaProblem(): string | null {
    const used = [...this.snapshots.values()].filter(({ dto }) => dto.state !== 'inactive').length;
    return used >= this.limits.snapshotQuota
      ? `Snapshot quota exceeded. Maximum allowed: ${this.limits.snapshotQuota}`
      : null;
  }

  private snapshotOf(idOrName: string): SnapshotRecord | undefined {
    return this.snapshots.get(idOrName) ?? [...this.snapshots.values()].find(({ dto }) => dto.name === idOrName);
  }

  private addSnapshot(
    id: string,
    name: string,
    resources: Record<string, unknown>,
    state: string,
    image: string | null
  ) {
    const now = new Date().toISOString();
    const record: SnapshotRecord = {
      dto: {
        id,
        name,
        organizationId: ORGANIZATION,
        general: false,
        state,
        size: null,
        entrypoint: null,
        errorReason: null,
        createdAt: now,
        updatedAt: now,
        lastUsedAt: null,
        sourceSandboxId: null,
        cpu: 1,
        gpu: 0,
        mem: 1,
        disk: 3,
        ...resources,
      },
      image,
    };
    this.snapshots.set(id, record);
    return record;
  }

  /** The image of a build info, built once per content (its Dockerfile and context archives). */
  private build(info: BuildInfo): Promise<{ ok: boolean; log: string; image: string }> {
    const hash = createHash('sha256')
      .update(JSON.stringify([info.dockerfileContent, info.contextHashes ?? []]))
      .digest('hex')
      .slice(0, 16);
    let build = this.builds.get(hash);
    if (!build) {
      const image = `daytona-stand-in-${this.runner.instance}:build-${hash}`;
      const contexts = (info.contextHashes ?? []).map((contextHash) => {
        const archive = this.storage.get(BUCKET, `${ORGANIZATION}/${contextHash}/context.tar`);
        if (!archive) throw new Error(`context ${contextHash} was never uploaded`);
        return archive;
      });
      build = this.runner.build(image, info.dockerfileContent, contexts).then((result) => ({ ...result, image }));
      this.builds.set(hash, build);
      void build.then(({ ok }) => ok || this.builds.delete(hash));
    }
    return build;
  }

  private createSnapshot(
    request: CreateBody,
    response: ServerResponse,
    fail: (status: number, message: string) => void
  ) {
    const name = request.name ?? '';
    if (this.snapshotOf(name)) return fail(409, `Snapshot with name ${name} already exists`);
    if (!request.buildInfo) {
      const invalid = imageNameProblem(String(request.imageName ?? ''));
      if (invalid) return fail(400, invalid);
    }
    if ((request.gpu ?? 0) > 1) return fail(400, 'gpu must not be greater than 1');
    const tooLarge = this.perSandboxProblem(request.cpu ?? 1, request.memory ?? 1, request.disk ?? 3);
    if (tooLarge) return fail(403, tooLarge);
    const quota = this.snapshotQuotaProblem();
    if (quota) return fail(403, quota);
    const resources = {
      cpu: request.cpu ?? 1,
      mem: request.memory ?? 1,
      disk: request.disk ?? 3,
      gpu: request.gpu ?? 0,
    };
    const record = this.addSnapshot(randomUUID(), name, resources, 'pending', null);
    const info: BuildInfo = request.buildInfo ?? {
      dockerfileContent: `FROM ${String(request.imageName)}\n`,
    };
    record.dto.buildInfo = info;
    // Built in the background, as Daytona's builder does: the SDK polls the snapshot's state.
    const build = Promise.resolve().then(() => {
      record.dto.state = 'building';
      return this.build(info);
    });
    record.log = build.then(
      ({ log }) => log,
      (err: Error) => err.message
    );
    void build.then(
      ({ ok, log, image }) => {
        record.image = ok ? image : null;
        record.dto.state = ok ? 'active' : 'build_failed';
        record.dto.errorReason = ok ? null : log.trim().split('\n').slice(-20).join('\n');
      },
      (err: Error) => {
        record.dto.state = 'error';
        record.dto.errorReason = err.message;
      }
    );
    return json(response, 200, record.dto);
  }

  private async createSandbox(
    request: CreateBody,
    response: ServerResponse,
    fail: (status: number, message: string) => void
  ) {
    const id = randomUUID();
    const now = new Date().toISOString();
    let image: string;
    let resources = {
      cpu: Number(request.cpu ?? 1),
      memory: Number(request.memory ?? 1),
      disk: Number(request.disk ?? 3),
      gpu: Number(request.gpu ?? 0),
    };
    const dto: SandboxRecord['dto'] = {
      id,
      name: request.name ?? id,
      organizationId: ORGANIZATION,
      snapshot: request.snapshot,
      user: request.user ?? 'daytona',
      env: request.env ?? {},
      labels: request.labels ?? {},
      public: false,
      networkBlockAll: Boolean(request.networkBlockAll),
      target: request.target ?? 'us',
      state: 'creating',
      autoStopInterval: request.autoStopInterval ?? 15,
      autoArchiveInterval: request.autoArchiveInterval ?? 10080,
      autoDeleteInterval: request.autoDeleteInterval ?? -1,
      ttlMinutes: request.ttlMinutes ?? 0,
      createdAt: now,
      updatedAt: now,
      toolboxProxyUrl: `${this.baseUrl()}/toolbox`,
    };
    const record: SandboxRecord = { dto, containerId: null };
    if (request.snapshot) {
      const snapshot = this.snapshotOf(request.snapshot);
      // A 400, not a 404 (sandbox.service.ts).
      if (!snapshot)
        return fail(400, `Snapshot ${request.snapshot} not found. Did you add it through the Daytona Dashboard?`);
      if (snapshot.dto.state !== 'active' || !snapshot.image)
        return fail(400, `Snapshot ${request.snapshot} is ${snapshot.dto.state}`);
      image = snapshot.image;
      resources = {
        cpu: Number(snapshot.dto.cpu),
        memory: Number(snapshot.dto.mem),
        disk: Number(snapshot.dto.disk),
        gpu: Number(snapshot.dto.gpu),
      };
    } else if (request.buildInfo) {
      const built = await this.build(request.buildInfo);
      if (!built.ok) {
        // The sandbox stays, failed: what Daytona shows for an image that does not build.
        Object.assign(dto, resources, { errorReason: built.log.trim().split('\n').slice(-20).join('\n') });
        this.sandboxes.set(id, record);
        this.notify('sandbox.created', { ...dto });
        this.moveTo(record, 'build_failed');
        return json(response, 200, dto);
      }
      image = built.image;
    } else {
      return fail(400, 'a snapshot or build info is required');
    }
    Object.assign(dto, resources);
    this.sandboxes.set(id, record);
    this.notify('sandbox.created', { ...dto });
    record.containerId = await this.runner.start({
      image,
      sandboxId: id,
      env: dto.env as Record<string, string>,
      cpu: resources.cpu,
      memoryGiB: resources.memory,
    });
    if (dto.networkBlockAll) await this.runner.setNetwork(record.containerId, false);
    this.moveTo(record, 'started');
    return json(response, 200, dto);
  }

  /** A sandbox's state change, as the API's notification gateway tells the organization's sockets of it. */
  private moveTo(record: SandboxRecord, state: string): void {
    const oldState = record.dto.state;
    record.dto.state = state;
    record.dto.updatedAt = new Date().toISOString();
    this.notify('sandbox.state.updated', { sandbox: { ...record.dto }, oldState, newState: state });
  }
}
