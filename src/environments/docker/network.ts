/** A trial container's network: cut off or connected per phase, and where it reaches this host. */
import type Docker from 'dockerode';

import type { PhaseNetwork } from '../../contracts/task-config';
import type { EnvironmentHandle } from '../../contracts/trial';

/** On a trial's container: the networks it is on when it may reach the network (see setNetwork). */
export const LABEL_PUBLIC_NETWORKS = 'rollout.public-networks';

/**
 * The network of every trial container that is not a compose project's: a bridge with inter-container traffic off,
 * so a trial cannot reach (or tamper with) another trial's container, of its job or any other; each reaches the
 * outside and this host (the model gateway) as on the default bridge. Shared by every Rollout process on the daemon
 * and never removed (it holds nothing).
 */
export const TRIALS_NETWORK = 'rollout-trials';
const ICC_OPTION = 'com.docker.network.bridge.enable_icc';

export class DockerNetwork {
  private trialsNetwork: Promise<string> | undefined;

  constructor(private readonly docker: Docker) {}

  /** TRIALS_NETWORK, created on first use (another process may create it at the same moment: that one is used). */
  trialNetwork(): Promise<string> {
    this.trialsNetwork ??= this.ensureTrialsNetwork().catch((err: unknown) => {
      this.trialsNetwork = undefined;
      throw err;
    });
    return this.trialsNetwork;
  }

  private async ensureTrialsNetwork(): Promise<string> {
    const found = async () =>
      (await this.docker.listNetworks({ filters: { name: [TRIALS_NETWORK] } })).find((n) => n.Name === TRIALS_NETWORK);
    let network = await found();
    if (!network) {
      await this.docker
        .createNetwork({
          Name: TRIALS_NETWORK,
          Driver: 'bridge',
          CheckDuplicate: true,
          Options: { [ICC_OPTION]: 'false' },
          Labels: { 'rollout.network': 'trials' },
        })
        .catch((err: unknown) => {
          if ((err as { statusCode?: number }).statusCode !== 409) throw err;
        });
      network = await found();
    }
    // A network of this name made by something else, with containers talking to each other, is not one to trust.
    if (network?.Options?.[ICC_OPTION] !== 'false') {
      throw new Error(
        `docker network ${TRIALS_NETWORK} exists without ${ICC_OPTION}=false: remove it (docker network rm ${TRIALS_NETWORK})`
      );
    }
    return TRIALS_NETWORK;
  }

  /**
   * The container on its own networks (the default bridge; a compose project's network), or on none at all. A container created with NetworkMode none holds
   * the `none` network, which must be left before joining another; with no network left it has only loopback.
   */
  async setNetwork(handle: EnvironmentHandle, network: PhaseNetwork): Promise<void> {
    const info = await this.docker.getContainer(handle.id).inspect();
    const joined = Object.keys(info.NetworkSettings?.Networks ?? {});
    const own = info.Config?.Labels?.[LABEL_PUBLIC_NETWORKS] ?? 'bridge';
    const wanted = network === 'public' ? own.split(',') : [];
    for (const name of joined.filter((n) => !wanted.includes(n))) {
      await this.docker.getNetwork(name).disconnect({ Container: handle.id, Force: true });
    }
    for (const name of wanted.filter((n) => !joined.includes(n))) {
      await this.docker.getNetwork(name).connect({ Container: handle.id });
    }
  }

  /**
   * The default bridge's gateway address (e.g. 172.17.0.1): containers reach the host there, and it lives on the
   * host's docker0 interface, so a listener on it is not reachable from other machines the way 0.0.0.0 would be.
   */
  async gatewayHost(): Promise<string> {
    const info = (await this.docker.getNetwork('bridge').inspect()) as {
      IPAM?: { Config?: { Gateway?: string; Subnet?: string }[] };
    };
    const config = info.IPAM?.Config?.find((c) => c.Gateway ?? c.Subnet?.includes('.'));
    if (config?.Gateway) return config.Gateway;
    // Docker leaves Gateway out of some inspections: the bridge then takes the subnet's first address.
    const subnet = /^(\d+)\.(\d+)\.(\d+)\.(\d+)\/\d+$/.exec(config?.Subnet ?? '');
    if (!subnet) throw new Error('docker network "bridge": no gateway address or IPv4 subnet to derive it from');
    const [a, b, c, d] = subnet.slice(1).map(Number) as [number, number, number, number];
    const first = (((a << 24) | (b << 16) | (c << 8) | d) >>> 0) + 1;
    return [first >>> 24, (first >>> 16) & 255, (first >>> 8) & 255, first & 255].join('.');
  }
}
