/**
 * The stand-in's sandboxes: each a local Docker container (labelled with the stand-in's instance) running a
 * template's image, with a process named `envd` in it as in an E2B sandbox (killing it breaks the sandbox, as it
 * would on E2B), killed when its timeout passes (E2B's platform-side lifetime).
 */
import type { ChildProcess } from 'node:child_process';
import { spawn } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';

import type { EnvdSandbox } from './envd';
import { docker, dockerOk } from './docker-cli';
import type { SandboxProcess } from './processes';
import type { TemplateRecord } from './templates';

/** The envd version the stand-in reports: one whose API the SDK uses in full (octet-stream uploads, closeStdin). */
export const ENVD_VERSION = '0.5.7';

export interface SandboxRecord extends EnvdSandbox {
  sandboxID: string;
  template: TemplateRecord;
  metadata: Record<string, string>;
  startedAt: Date;
  endAt: Date;
  timer?: NodeJS.Timeout;
}

export class Sandboxes {
  readonly byId = new Map<string, SandboxRecord>();

  constructor(private readonly label: string) {}

  async create(
    template: TemplateRecord,
    image: string,
    body: {
      metadata?: Record<string, string>;
      envVars?: Record<string, string>;
      timeout?: number;
      allow_internet_access?: boolean;
    }
  ): Promise<SandboxRecord> {
    const sandboxID = `i${randomBytes(10).toString('hex')}`;
    const containerId = await dockerOk([
      'run',
      '-d',
      '--label',
      `rollout.e2b-stand-in=${this.label}`,
      '--label',
      `e2b.sandbox=${sandboxID}`,
      `--cpus=${template.cpuCount}`,
      `--memory=${template.memoryMB}m`,
      ...(body.allow_internet_access === false ? ['--network', 'none'] : []),
      // E2B's init reaps what it inherits (the stand-in's PID 1 must too, or a killed daemon stays a zombie).
      '--init',
      '--entrypoint',
      'sleep',
      image,
      'infinity',
    ]);
    const envd = await startEnvd(containerId);
    const processes = new Map<number, SandboxProcess>();
    const now = new Date();
    const sandbox: SandboxRecord = {
      sandboxID,
      template,
      containerId,
      envdAccessToken: randomUUID(),
      defaultUser: template.user,
      envVars: body.envVars ?? {},
      knownDirs: new Set(),
      processes,
      metadata: body.metadata ?? {},
      startedAt: now,
      endAt: now,
      alive: () => Promise.resolve(envd.exitCode === null && envd.signalCode === null),
    };
    this.byId.set(sandboxID, sandbox);
    this.setTimeout(sandbox, body.timeout ?? 300);
    if (template.startCmd) {
      await docker(['exec', '-d', '-u', template.user, containerId, '/bin/sh', '-c', template.startCmd]);
    }
    return sandbox;
  }

  /** E2B's internet access switched: the container leaves or joins Docker's default bridge. */
  async setInternetAccess(sandbox: SandboxRecord, allowed: boolean): Promise<void> {
    const networks = await dockerOk(['inspect', '-f', '{{json .NetworkSettings.Networks}}', sandbox.containerId]);
    const attached = Object.keys(JSON.parse(networks) as Record<string, unknown>);
    if (!allowed) {
      for (const network of attached) await dockerOk(['network', 'disconnect', network, sandbox.containerId]);
    } else if (!attached.includes('bridge')) {
      if (attached.includes('none')) await dockerOk(['network', 'disconnect', 'none', sandbox.containerId]);
      await dockerOk(['network', 'connect', 'bridge', sandbox.containerId]);
    }
  }

  /** E2B kills a sandbox when its timeout passes; a new timeout counts from now. */
  setTimeout(sandbox: SandboxRecord, seconds: number): void {
    clearTimeout(sandbox.timer);
    sandbox.endAt = new Date(Date.now() + seconds * 1000);
    sandbox.timer = setTimeout(() => void this.kill(sandbox.sandboxID), seconds * 1000);
    sandbox.timer.unref();
  }

  async kill(sandboxID: string): Promise<boolean> {
    const sandbox = this.byId.get(sandboxID);
    if (!sandbox) return false;
    this.byId.delete(sandboxID);
    clearTimeout(sandbox.timer);
    await docker(['rm', '-f', sandbox.containerId]);
    return true;
  }

  async killAll(): Promise<void> {
    for (const id of [...this.byId.keys()]) await this.kill(id);
    // Containers of sandboxes whose record went with an earlier failure.
    const left = await dockerOk(['ps', '-aq', '--filter', `label=rollout.e2b-stand-in=${this.label}`]);
    if (left) await docker(['rm', '-f', ...left.split('\n')]);
  }

  listed(sandbox: SandboxRecord): unknown {
    return {
      sandboxID: sandbox.sandboxID,
      templateID: sandbox.template.templateID,
      alias: sandbox.template.name,
      clientID: 'stand-in',
      startedAt: sandbox.startedAt.toISOString(),
      endAt: sandbox.endAt.toISOString(),
      cpuCount: sandbox.template.cpuCount,
      memoryMB: sandbox.template.memoryMB,
      diskSizeMB: 10240,
      metadata: sandbox.metadata,
      state: 'running',
      envdVersion: ENVD_VERSION,
    };
  }
}

/**
 * The sandbox's `envd`: a copy of `sleep` under that name (coreutils' sleep; a busybox image has none), run by a
 * `docker exec` the stand-in holds, so its end (a kill from inside the sandbox) is seen at once.
 */
async function startEnvd(containerId: string): Promise<ChildProcess> {
  await dockerOk([
    'exec',
    '-u',
    'root',
    containerId,
    '/bin/sh',
    '-c',
    'mkdir -p /run/e2b && cp "$(command -v sleep)" /run/e2b/envd',
  ]);
  const envd = spawn('docker', ['exec', '-u', 'root', containerId, '/run/e2b/envd', 'infinity'], { stdio: 'ignore' });
  // Until it runs, a command could start before it and count as a system process (see the provider's killAll).
  for (let i = 0; i < 100; i++) {
    const ps = await docker(['exec', containerId, '/bin/sh', '-c', 'cat /proc/[0-9]*/comm']);
    if (ps.stdout.toString('utf8').split('\n').includes('envd')) return envd;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  envd.kill();
  throw new Error(`envd did not start in container ${containerId}`);
}
