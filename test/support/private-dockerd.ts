/**
 * A Docker daemon of the test's own, for tests that crash and restart the daemon: killing the host's dockerd would
 * kill every other Rollout user's containers on it. The private daemon has its own socket, data and exec roots,
 * containerd and bridge (no iptables rules, so it cannot disturb the host's), and starts with the host's base image.
 * Everything Docker-related the test and the processes it starts do goes to it through DOCKER_HOST.
 */
import { execFileSync, spawn } from 'node:child_process';
import { mkdirSync, openSync, readFileSync } from 'node:fs';
import path from 'node:path';

import Docker from 'dockerode';

import { waitFor } from './wait';

const BASE_IMAGE = 'debian:bookworm-slim';

export interface PrivateDockerd {
  /** `unix://…`, as DOCKER_HOST takes it. */
  host: string;
  /** SIGKILLs the daemon (its containers die with it) and starts it again, as a crash and a restart would. */
  crashAndRestart(): Promise<void>;
  stop(): Promise<void>;
}

/** Starts a private daemon named after `id` (a number below 65536, e.g. the test server's port) and points
 * this process's DOCKER_HOST at it. Needs root, as dockerd does. */
export async function startPrivateDockerd(id: number): Promise<PrivateDockerd> {
  const root = `/tmp/rollout-dockerd-${id}`;
  const socket = path.join(root, 'docker.sock');
  const pidFile = path.join(root, 'dockerd.pid');
  const bridge = `rollout-d${id}`;
  mkdirSync(root, { recursive: true });
  ensureBridge(bridge, `10.254.${id % 256}.1/24`);
  const args = [
    `--host=unix://${socket}`,
    `--data-root=/var/lib/rollout-dockerd-${id}`,
    `--exec-root=${path.join(root, 'exec')}`,
    `--pidfile=${pidFile}`,
    `--bridge=${bridge}`,
    '--iptables=false',
    '--ip-masq=false',
  ];
  const hostDocker = process.env.DOCKER_HOST;
  const docker = new Docker({ socketPath: socket });

  const start = async (): Promise<void> => {
    const log = openSync(path.join(root, 'dockerd.log'), 'a');
    spawn('dockerd', args, { detached: true, stdio: ['ignore', log, log] }).unref();
    await waitFor(
      `the private dockerd at ${socket} to answer (log: ${root}/dockerd.log)`,
      () =>
        docker.ping().then(
          () => true,
          () => false
        ),
      60_000
    );
  };
  const kill = async (file: string, signal: NodeJS.Signals): Promise<void> => {
    const pid = Number(readFileSync(file, 'utf8').trim());
    if (!alive(pid)) return;
    process.kill(pid, signal);
    await waitFor(`${file}'s process to exit`, () => !alive(pid), 60_000);
  };

  await start();
  if (!(await docker.listImages({ filters: { reference: [BASE_IMAGE] } })).length) {
    // `docker save | docker load`, host daemon to private one.
    execFileSync('sh', ['-c', `docker save ${BASE_IMAGE} | DOCKER_HOST=unix://${socket} docker load -q`], {
      env: { ...process.env, DOCKER_HOST: hostDocker ?? '' },
      stdio: ['ignore', 'ignore', 'inherit'],
    });
  }
  process.env.DOCKER_HOST = `unix://${socket}`;
  return {
    host: `unix://${socket}`,
    crashAndRestart: async () => {
      // As the service going down does: dockerd and the containerd it manages (the containers' shims live on).
      await kill(pidFile, 'SIGKILL');
      await kill(path.join(root, 'exec', 'containerd', 'containerd.pid'), 'SIGKILL');
      await start();
    },
    stop: async () => {
      if (hostDocker === undefined) delete process.env.DOCKER_HOST;
      else process.env.DOCKER_HOST = hostDocker;
      await kill(pidFile, 'SIGTERM');
    },
  };
}

function ensureBridge(name: string, address: string): void {
  const ip = (...args: string[]): void => void execFileSync('ip', args, { stdio: 'ignore' });
  try {
    ip('link', 'show', name);
    return;
  } catch {
    // absent: create it below
  }
  ip('link', 'add', 'name', name, 'type', 'bridge');
  ip('addr', 'add', address, 'dev', name);
  ip('link', 'set', name, 'up');
}

export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
