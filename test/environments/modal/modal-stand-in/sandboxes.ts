/**
 * The stand-in's sandboxes (Modal's V2 sandboxes, the SDK's default): each a container of the local Docker engine,
 * from a built image, with the definition's command (the image's ENTRYPOINT kept), workdir, environment, CPU and
 * memory limits, network access and tags; ended by terminate or by its timeout, as on Modal.
 */
import { randomBytes } from 'node:crypto';

import type Docker from 'dockerode';

import type { StandInImages } from './images';
import type { Message } from './proto';
import { grpcError } from './proto';

/** The Environment every workspace has (`modal environment list`: "main", the default). */
export const DEFAULT_ENVIRONMENT = 'main';
const TERMINATED = 3;
const TIMEOUT = 4;
/** What a sandbox without a command runs: it stays up until its timeout or terminate. */
const IDLE = ['sleep', 'infinity'];

export interface SandboxRecord {
  id: string;
  /** The Modal Environment of its App (SandboxListV2 without an App lists one Environment). */
  environment: string;
  taskId: string;
  appId: string;
  containerId: string;
  tags: Message[];
  createdAt: number;
  result: Message | null;
  timer: NodeJS.Timeout;
}

const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';

function base62(length: number): string {
  return [...randomBytes(length)].map((byte) => BASE62[byte % 62]).join('');
}

/** BLOCKED, or an allowlist without entries: no way out (the stand-in keeps no finer policy). */
function cutOff(access: Message): boolean {
  const { networkAccessType: type, allowedCidrs, allowedDomains } = access;
  return type === 2 || (type === 3 && !(allowedCidrs as string[]).length && !(allowedDomains as string[]).length);
}

export class StandInSandboxes {
  readonly byId = new Map<string, SandboxRecord>();
  private lastCreatedAt = 0;

  constructor(
    private readonly docker: Docker,
    private readonly images: StandInImages,
    private readonly label: Record<string, string>
  ) {}

  /**
   * A sandbox of SandboxCreateV2 (env in secret_sources) or of the V1 SandboxCreate, GPU sandboxes' path (env in the
   * ephemeral secrets named by secret_ids, given here as `secretEnv`). V1 ids are `sb-` and 22 base62 characters,
   * V2's anything else: the SDK tells them apart by that shape (`isV1SandboxId` in the `modal` JS SDK).
   */
  async create(
    request: Message,
    how: { version: 'V1' | 'V2'; environment: string; secretEnv?: string[] }
  ): Promise<SandboxRecord> {
    const definition = request.definition as Message;
    const tag = this.images.localTag(definition.imageId as string);
    if (!tag) throw grpcError(5, `Image ${String(definition.imageId)} not found`);
    const resources = (definition.resources as Message | undefined) ?? {};
    const env: string[] = [...(how.secretEnv ?? [])];
    for (const source of (request.secretSources as Message[] | undefined) ?? []) {
      const contents = ((source.env as Message | undefined)?.contents as Record<string, string>) ?? {};
      env.push(...Object.entries(contents).map(([key, value]) => `${key}=${value}`));
    }
    const network = definition.networkAccess as Message | undefined;
    const blocked = Boolean(definition.blockNetwork) || (network !== undefined && cutOff(network));
    const milliCpu = Number(resources.milliCpuMax || resources.milliCpu || 0);
    const memoryMb = Number(resources.memoryMbMax || resources.memoryMb || 0);
    const args = definition.entrypointArgs as string[];
    const container = await this.docker.createContainer({
      Image: tag,
      Cmd: args.length ? args : IDLE,
      Env: env,
      ...(definition.workdir ? { WorkingDir: definition.workdir as string } : {}),
      Labels: this.label,
      HostConfig: {
        ...(milliCpu ? { NanoCpus: milliCpu * 1e6 } : {}),
        ...(memoryMb ? { Memory: memoryMb * 1024 * 1024 } : {}),
      },
    });
    await container.start();
    // Created on the bridge and cut off after (not network mode none), so that TaskSetNetworkAccess can connect it.
    if (blocked) await this.docker.getNetwork('bridge').disconnect({ Container: container.id, Force: true });
    // Listing pages by creation time: every sandbox gets its own.
    this.lastCreatedAt = Math.max(Date.now() / 1000, this.lastCreatedAt + 0.001);
    const id = how.version === 'V1' ? `sb-${base62(22)}` : `sb-${randomBytes(12).toString('hex')}`;
    const timeoutSecs = Number(definition.timeoutSecs) || 300;
    const record: SandboxRecord = {
      id,
      environment: how.environment,
      taskId: `ta-${randomBytes(12).toString('hex')}`,
      appId: request.appId as string,
      containerId: container.id,
      tags: request.tags as Message[],
      createdAt: this.lastCreatedAt,
      result: null,
      timer: setTimeout(() => void this.end(record, { status: TIMEOUT }), timeoutSecs * 1000),
    };
    record.timer.unref();
    this.byId.set(id, record);
    return record;
  }

  get(sandboxId: string): SandboxRecord {
    const record = this.byId.get(sandboxId);
    if (!record) throw grpcError(5, `Sandbox ${sandboxId} not found`);
    return record;
  }

  byTask(taskId: string): SandboxRecord {
    for (const record of this.byId.values()) if (record.taskId === taskId) return record;
    throw grpcError(5, `Task ${taskId} not found`);
  }

  /**
   * SandboxListV2: running sandboxes (V1 and V2) of the App, or else of the Environment named (the default one when
   * none is), that carry every tag asked, newest first, paged by time.
   */
  list(request: Message): Message[] {
    const environment = (request.environmentName as string) || DEFAULT_ENVIRONMENT;
    const wanted = request.tags as Message[];
    const before = Number(request.beforeTimestamp) || Infinity;
    return [...this.byId.values()]
      .filter((record) => !record.result || request.includeFinished)
      .filter((record) => (request.appId ? record.appId === request.appId : record.environment === environment))
      .filter((record) => record.createdAt < before)
      .filter((record) =>
        wanted.every((tag) => record.tags.some((t) => t.tagName === tag.tagName && t.tagValue === tag.tagValue))
      )
      .sort((a, b) => b.createdAt - a.createdAt)
      .map((record) => ({ id: record.id, createdAt: record.createdAt, appId: record.appId, tags: record.tags }));
  }

  /** SandboxTerminateV2: the container goes at once; the result is TERMINATED unless it had ended already. */
  async terminate(sandboxId: string): Promise<Message> {
    const record = this.get(sandboxId);
    const existing = record.result;
    await this.end(record, { status: TERMINATED, exitcode: 137 });
    return existing ? { existingResult: existing } : {};
  }

  /** SandboxWaitV2: the result once the sandbox has ended, waiting at most `timeout` seconds for it. */
  async wait(sandboxId: string, timeoutSec: number): Promise<Message> {
    const record = this.get(sandboxId);
    const deadline = Date.now() + timeoutSec * 1000;
    while (!record.result && Date.now() < deadline) {
      if (!(await this.running(record))) await this.end(record, { status: TERMINATED, exitcode: 137 });
      else await new Promise((resolve) => setTimeout(resolve, Math.min(250, deadline - Date.now())));
    }
    return record.result ? { result: record.result } : {};
  }

  /** Docker's state of the container: a sandbox whose container was killed from outside has ended. */
  async running(record: SandboxRecord): Promise<boolean> {
    if (record.result) return false;
    const info = await this.docker
      .getContainer(record.containerId)
      .inspect()
      .catch(() => null);
    return info?.State.Running ?? false;
  }

  /** Commits the sandbox's container as an image (TaskSnapshotFilesystem). */
  async snapshot(record: SandboxRecord, repository: string, imageId: string): Promise<string> {
    const tag = `${repository}:${imageId}`;
    await this.docker.getContainer(record.containerId).commit({ repo: repository, tag: imageId });
    return tag;
  }

  /** TaskSetNetworkAccess: a policy with no way out cuts the container off; any other connects it. */
  async setNetwork(record: SandboxRecord, access: Message): Promise<void> {
    const cut = cutOff(access);
    const bridge = this.docker.getNetwork('bridge');
    const info = await this.docker.getContainer(record.containerId).inspect();
    const connected = 'bridge' in (info.NetworkSettings.Networks ?? {});
    if (cut && connected) await bridge.disconnect({ Container: record.containerId, Force: true });
    if (!cut && !connected) await bridge.connect({ Container: record.containerId });
  }

  async end(record: SandboxRecord, result: Message): Promise<void> {
    clearTimeout(record.timer);
    record.result ??= result;
    await this.docker
      .getContainer(record.containerId)
      .remove({ force: true })
      .catch(() => undefined); // removed already
  }

  async removeAll(): Promise<void> {
    for (const record of this.byId.values()) await this.end(record, { status: TERMINATED, exitcode: 137 });
  }
}
