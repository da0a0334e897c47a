/**
 * Images on Daytona: a task's environment/Dockerfile is built where Daytona builds, into a snapshot named after the
 * environment's content key and the sandbox size (a snapshot fixes its sandboxes' CPUs, memory, disk and GPUs), so
 * one environment builds once per account and every job reuses it. A present `docker_image` (without a Dockerfile)
 * becomes a snapshot as it is, pulled by Daytona. Install snapshots are snapshots of a sandbox after an agent's
 * install, named after the base snapshot.
 */
import { createHash } from 'node:crypto';
import path from 'node:path';

import type { Daytona, Snapshot } from '@daytonaio/sdk';
import { DaytonaError, Image } from '@daytonaio/sdk';

import type { EnvironmentHandle, TrialResources } from '../../contracts/trial';
import { hasDockerfileIn } from '../dockerfile';
import type { BuildRequest, BuildResult, InstallSnapshots } from '../../contracts/environment';
import { LABEL_ENV_KEY, TaskEnvironmentError } from '../../contracts/environment';
import { CloudQuotaError } from '../kit/quota';
import type { DaytonaClients } from './client';
import { daytonaCall, ifFound } from './client';
import { daytonaSettings } from './settings';

const GIB = 2 ** 30;
/** How often a snapshot another worker builds is asked after. */
const POLL_MS = 2_000;

/** A sandbox's size in Daytona's units (whole CPUs, GiB); what could not be given exactly is named in `inexact`. */
export interface SandboxSize {
  cpu: number;
  memory: number;
  /** GiB; undefined: Daytona's default (the task sets no storage limit). */
  disk?: number;
  gpu?: number;
  inexact: string[];
}

export function sandboxSize(resources: TrialResources | undefined, gpus = 0): SandboxSize {
  const cpus = resources?.cpus ?? 1;
  const memoryBytes = resources?.memoryBytes ?? GIB;
  const storageBytes = resources?.storageBytes ?? 0;
  const size: SandboxSize = {
    cpu: Math.max(1, Math.ceil(cpus)),
    memory: Math.max(1, Math.ceil(memoryBytes / GIB)),
    ...(storageBytes > 0 ? { disk: Math.max(1, Math.ceil(storageBytes / GIB)) } : {}),
    ...(gpus > 0 ? { gpu: gpus } : {}),
    inexact: [],
  };
  // Rounded up: the sandbox may use more than the task asked.
  if (size.cpu !== cpus) size.inexact.push('cpus');
  if (size.memory * GIB !== memoryBytes) size.inexact.push('memory');
  if (size.disk !== undefined && size.disk * GIB !== storageBytes) size.inexact.push('storage');
  return size;
}

/**
 * The snapshot of an environment at a size in a region: `rollout-<env key>-<cpu>c<memory>g<disk>d[<gpu>gpu][-<target>]`.
 * Snapshots are available per region (sandbox.service.ts: "Snapshot X is not available in region Y"): one built for
 * another target is not this one's.
 */
export function snapshotName(envKey: string, size: SandboxSize, target = ''): string {
  const region = target ? `-${target}` : '';
  return `rollout-${envKey}-${size.cpu}c${size.memory}g${size.disk ?? 0}d${size.gpu ? `${size.gpu}gpu` : ''}${region}`;
}

/** A job's target (region): its `target` key, else the worker's DAYTONA_TARGET; '' for the account's default. */
export function daytonaTarget(settings: BuildRequest['settings']): string {
  return daytonaSettings(settings).target ?? process.env.DAYTONA_TARGET ?? '';
}

export class DaytonaSnapshots {
  /** Snapshots this process rebuilt for a job's force_build (once per job, not per trial). */
  private readonly forced = new Set<string>();

  constructor(
    private readonly clients: DaytonaClients,
    /** How long quota replies are waited on (undefined: ROLLOUT_CLOUD_QUOTA_WAIT_SEC's). */
    private readonly quotaWaitMs: number | undefined
  ) {}

  /**
   * The environment's snapshot, built unless present. `built` is true when this call built it: the job then
   * releases it (delete: true) once no sandbox of any job still runs from it.
   */
  async build(request: BuildRequest): Promise<BuildResult> {
    const hasDockerfile = await hasDockerfileIn(request.contextDir);
    if (!hasDockerfile && !request.dockerImage) {
      throw new TaskEnvironmentError(
        'EnvironmentBuildError',
        `${path.join(request.contextDir, 'Dockerfile')}: missing, and the task sets no environment.docker_image`
      );
    }
    const size = sandboxSize(request.resources, request.gpus);
    return this.ensure(snapshotName(request.envKey, size, daytonaTarget(request.settings)), request);
  }

  /** The snapshot `name` of the request's Dockerfile, waited for when another worker builds it, else built. */
  async ensure(name: string, request: BuildRequest): Promise<BuildResult> {
    const client = this.clients.client(daytonaSettings(request.settings).target);
    const deadline = Date.now() + request.timeoutMs;
    const forceKey = `${request.jobName}\n${name}`;
    for (;;) {
      request.signal?.throwIfAborted();
      const existing = await ifFound(daytonaCall(() => client.snapshot.get(name), { signal: request.signal }));
      if (existing?.state === 'inactive') {
        // Deactivated after 14 days unused (snapshot.manager.ts DEFAULT_SNAPSHOT_DEACTIVATION_TIMEOUT_MINUTES):
        // activated again (snapshot.service.ts activateSnapshot), or, when Daytona refuses that, built again.
        const activated = await daytonaCall(() => client.snapshot.activate(existing)).then(
          () => true,
          (err: unknown) => {
            if (!(err instanceof DaytonaError) || err instanceof CloudQuotaError) throw err;
            return false;
          }
        );
        if (!activated) await this.deleteSnapshot(client, existing);
        continue;
      }
      const rebuild = request.force && !this.forced.has(forceKey);
      if (
        existing &&
        (existing.state === 'build_failed' || existing.state === 'error' || (rebuild && existing.state === 'active'))
      ) {
        // A failed build is tried again (its cause may have been passing); force_build rebuilds once per job.
        await this.deleteSnapshot(client, existing);
        continue;
      }
      if (existing?.state === 'active') return { image: name, built: false };
      if (existing) {
        if (Date.now() > deadline)
          throw buildError(`snapshot ${name} still ${existing.state} after ${request.timeoutMs / 1000} s`);
        await new Promise((resolve) => setTimeout(resolve, POLL_MS));
        continue;
      }
      this.forced.add(forceKey);
      const created = await this.create(name, request).catch((err: unknown) => {
        // Another worker started the same build a moment ago: wait for it.
        if (err instanceof DaytonaError && err.statusCode === 409) return null;
        throw err;
      });
      if (created) return { image: name, built: true };
    }
  }

  private async create(name: string, request: BuildRequest): Promise<Snapshot> {
    const client = this.clients.client(daytonaSettings(request.settings).target);
    const size = sandboxSize(request.resources, request.gpus);
    // A present docker_image alone is taken as is (Daytona pulls it into the snapshot); else the Dockerfile is built.
    const image =
      request.dockerImage && !(await hasDockerfileIn(request.contextDir))
        ? pulledImage(request.dockerImage)
        : Image.fromDockerfile(path.join(request.contextDir, 'Dockerfile'), { strictContext: true });
    try {
      return await daytonaCall(
        () =>
          client.snapshot.create(
            {
              name,
              image,
              resources: { cpu: size.cpu, memory: size.memory, disk: size.disk, gpu: size.gpu },
            },
            { timeout: Math.ceil(request.timeoutMs / 1000), onLogs: request.onOutput }
          ),
        { maxWaitMs: this.quotaWaitMs, signal: request.signal }
      );
    } catch (err) {
      // The SDK's own words for a build that failed (its snapshot is left in build_failed, retried next time).
      if (err instanceof DaytonaError && /Failed to create snapshot/.test(err.message)) throw buildError(err.message);
      throw err;
    }
  }

  /**
   * Releases a snapshot this job built: deleted (with its install snapshots) unless a sandbox of any job still runs
   * from it (false: kept). A job that later finds it gone builds it again.
   */
  async remove(image: string, envKey: string): Promise<boolean> {
    const client = this.clients.client();
    const inUse = await daytonaCall(async () => {
      for await (const _ of client.list({ labels: { [LABEL_ENV_KEY]: envKey }, limit: 1 })) return true;
      return false;
    });
    if (inUse) return false;
    for (const snapshot of await this.allSnapshots()) {
      if (snapshot.name === image || snapshot.name.startsWith(`${image}-agent-`)) {
        await this.deleteSnapshot(client, snapshot);
      }
    }
    return true;
  }

  /** Deletes a snapshot; one already gone is no error. */
  private async deleteSnapshot(client: Daytona, snapshot: Snapshot): Promise<void> {
    await ifFound(daytonaCall(() => client.snapshot.delete(snapshot)));
  }

  private async allSnapshots(): Promise<Snapshot[]> {
    const client = this.clients.client();
    const all: Snapshot[] = [];
    for (let page = 1; ; page += 1) {
      const { items, totalPages } = await daytonaCall(() => client.snapshot.list(page, 100));
      all.push(...items);
      if (page >= totalPages) return all;
    }
  }

  /** Install snapshots: a sandbox's snapshot after an agent's install, per base snapshot and install key. */
  installSnapshots(): InstallSnapshots {
    const nameOf = (baseImage: string, key: string) =>
      `${baseImage}-agent-${createHash('sha256').update(key).digest('hex').slice(0, 16)}`;
    return {
      find: async (baseImage, key) => {
        const client = this.clients.client();
        const snapshot = await ifFound(daytonaCall(() => client.snapshot.get(nameOf(baseImage, key))));
        return snapshot?.state === 'active' ? snapshot.name : null;
      },
      take: async (handle: EnvironmentHandle, key: string) => {
        const sandbox = await this.clients.sandbox(handle.id);
        const base = sandbox.snapshot ?? '';
        if (!base.startsWith('rollout-'))
          throw new Error(`sandbox ${handle.id} was not started from a Rollout snapshot`);
        const name = nameOf(base, key);
        await daytonaCall(() => sandbox.createSnapshot(name, 10 * 60));
        return name;
      },
    };
  }
}

/**
 * A docker_image as Daytona takes it. An image name must carry an explicit tag or digest, and `:latest` is refused
 * (snapshot.service.ts validateImageName): such a name is built as `FROM <name>` instead, which Daytona's builder pulls
 * as Docker would.
 */
export function pulledImage(dockerImage: string): string | Image {
  const lastPart = dockerImage.split('/').pop() ?? '';
  const pinned = dockerImage.includes('@') || (lastPart.includes(':') && !lastPart.endsWith(':latest'));
  return pinned ? dockerImage : Image.base(dockerImage);
}

function buildError(message: string): TaskEnvironmentError {
  return new TaskEnvironmentError('EnvironmentBuildError', message);
}
