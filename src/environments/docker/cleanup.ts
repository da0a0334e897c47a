/** Stopping and removing a trial's containers, and finding what this host still holds (for the janitor). */
import type { EnvironmentHandle } from '../../contracts/trial';
import type { HeldEnvironment } from '../../contracts/environment';
import { LABEL_DEPLOYMENT, LABEL_HOST, LABEL_ROLE, LABEL_TRIAL, LABEL_WORKER } from '../../contracts/environment';
import type { DockerEngine } from './engine';
import { ignoreMissing, statusCode } from './engine';
import { LABEL_COMPOSE_PROJECT } from './compose';
import type { DockerExec } from './exec';

/** heldEnvironments' id for a trial's networks and volumes left without containers. */
const ORPHANS_OF = 'orphans-of:';

export class DockerCleanup {
  /** Trials this process started on a single container (no compose project): cleanup need not look for networks. */
  private readonly loneContainerTrials = new Set<string>();

  constructor(
    private readonly engine: DockerEngine,
    private readonly execs: DockerExec
  ) {}

  /** A trial started on a single container, by this process. */
  startedAlone(trialId: string): void {
    this.loneContainerTrials.add(trialId);
  }

  /**
   * Kills and removes the container in one call (cleanup follows every stop, so nothing is kept by stopping alone).
   * PID 1 (`sleep`, no handler) ignores SIGTERM, so any grace period would only be waited out: killed at once. A
   * compose project's other services, network and volumes go at cleanup.
   */
  async stop(handle: EnvironmentHandle): Promise<void> {
    await this.removeContainer(handle.id);
  }

  async halt(handle: EnvironmentHandle): Promise<void> {
    try {
      // PID 1 (`sleep`, no handler) ignores SIGTERM, so any grace period would only be waited out: kill at once.
      await this.engine.docker.getContainer(handle.id).stop({ t: 0 });
    } catch (err) {
      if (statusCode(err) !== 304) throw err; // already stopped
    }
  }

  async remove(handle: EnvironmentHandle): Promise<void> {
    if (handle.id.startsWith(ORPHANS_OF)) {
      await this.removeTrial(handle.id.slice(ORPHANS_OF.length));
      return;
    }
    this.execs.forget(handle.id);
    // A compose service is part of its trial's environment: all of it (sidecars, network, volumes) goes.
    const info = await ignoreMissing(this.engine.docker.getContainer(handle.id).inspect());
    const labels = info?.Config.Labels ?? {};
    const trialId = labels[LABEL_TRIAL];
    // (Another host's service goes alone: removeTrial finds only this host's.)
    const ours =
      labels[LABEL_DEPLOYMENT] === this.engine.owner.deployment && labels[LABEL_HOST] === this.engine.owner.hostId;
    if (labels[LABEL_COMPOSE_PROJECT] && trialId && ours) {
      await this.removeTrial(trialId);
      return;
    }
    await this.removeContainer(handle.id);
  }

  async removeContainer(id: string): Promise<void> {
    this.execs.forget(id);
    try {
      await this.engine.docker.getContainer(id).remove({ force: true, v: true });
    } catch (err) {
      if (![404, 409].includes(statusCode(err) ?? 0)) throw err; // gone, or its removal already under way
    }
  }

  async removeRole(trialId: string, role: string): Promise<void> {
    const filters = this.engine.ownedBy(`${LABEL_TRIAL}=${trialId}`, `${LABEL_ROLE}=${role}`);
    for (const container of await this.engine.docker.listContainers({ all: true, filters })) {
      await this.removeContainer(container.Id);
    }
  }

  async removeTrial(trialId: string): Promise<number> {
    const owned = { filters: this.engine.ownedBy(`${LABEL_TRIAL}=${trialId}`) };
    // Only a compose project has networks and volumes of its own: a trial this process started on a lone container
    // needs no look for them.
    const lone = this.loneContainerTrials.delete(trialId);
    const [containers, networks, volumes] = await Promise.all([
      this.engine.docker.listContainers({ all: true, ...owned }),
      lone ? [] : this.engine.docker.listNetworks(owned),
      lone ? [] : this.engine.docker.listVolumes(owned).then(({ Volumes }) => Volumes ?? []),
    ]);
    await Promise.all(containers.map((container) => this.removeContainer(container.Id)));
    // A compose project's network and volumes, once no container uses them.
    for (const network of networks) await ignoreMissing(this.engine.docker.getNetwork(network.Id).remove());
    for (const volume of volumes) await ignoreMissing(this.engine.docker.getVolume(volume.Name).remove());
    return containers.length;
  }

  /**
   * The trials' containers (other hosts' of this deployment marked `elsewhere`), and this host's networks and volumes
   * of compose projects whose containers are gone (a crash between their removals): those stand for their trial as
   * `ORPHANS_OF<trial id>`, which remove() takes.
   */
  async heldEnvironments(): Promise<HeldEnvironment[]> {
    const filters = this.engine.ownedBy(LABEL_TRIAL);
    // Every host's containers of this deployment on this daemon: a host that shared it and never came back left its
    // own, which nothing else would find.
    const deploymentFilters = { label: [`${LABEL_DEPLOYMENT}=${this.engine.owner.deployment}`, LABEL_TRIAL] };
    const containers = await this.engine.docker.listContainers({ all: true, filters: deploymentFilters });
    const held: HeldEnvironment[] = containers.map((container) => ({
      id: container.Id,
      trialId: container.Labels[LABEL_TRIAL] ?? '',
      workerId: container.Labels[LABEL_WORKER] ?? null,
      ...(container.Labels[LABEL_HOST] !== this.engine.owner.hostId ? { elsewhere: true } : {}),
    }));
    const withContainers = new Set(held.filter((h) => !h.elsewhere).map((h) => h.trialId));
    const networks = await this.engine.docker.listNetworks({ filters });
    const { Volumes: volumes } = await this.engine.docker.listVolumes({ filters });
    for (const { Labels: labels } of [...networks, ...(volumes ?? [])]) {
      const trialId = labels?.[LABEL_TRIAL];
      if (!trialId || withContainers.has(trialId)) continue;
      withContainers.add(trialId);
      held.push({ id: `${ORPHANS_OF}${trialId}`, trialId, workerId: labels[LABEL_WORKER] ?? null });
    }
    return held;
  }
}
