/**
 * A real image registry (CNCF distribution, built from the Go module proxy by scripts/setup-tests.sh) on a local port, for
 * the kubernetes environment's pushes. Docker treats 127.0.0.0/8 registries as insecure (plain HTTP) by default.
 */
import type { ChildProcess } from 'node:child_process';
import { spawn } from 'node:child_process';
import { access, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { homedir, tmpdir } from 'node:os';
import path from 'node:path';

import { waitFor } from './wait';

export const REGISTRY_VERSION = 'v3.0.0';

export interface ImageRegistry {
  /** host:port, as job.yaml's image_registry takes it. */
  address: string;
  /** Tags of a repository the registry holds. */
  tags(repository: string): Promise<string[]>;
  stop(): Promise<void>;
}

/** Where setup-tests.sh puts the registry binary (ROLLOUT_REGISTRY_BIN overrides). */
export function registryBinary(): string {
  const cache = process.env.ROLLOUT_CACHE_DIR ?? path.join(homedir(), '.cache', 'rollout');
  return process.env.ROLLOUT_REGISTRY_BIN ?? path.join(cache, 'registry', REGISTRY_VERSION, 'registry');
}

/** Builds the registry binary with scripts/setup-tests.sh's own part (go install, once), its log on stderr. */
export async function buildImageRegistry(): Promise<void> {
  const root = path.join(__dirname, '..', '..', '..');
  await new Promise<void>((resolve, reject) => {
    const child = spawn('bash', [path.join(root, 'scripts', 'setup-tests.sh'), 'image-registry'], {
      cwd: root,
      stdio: ['ignore', process.stderr, process.stderr],
    });
    child.once('error', reject);
    child.once('exit', () => resolve());
  });
}

/** Starts the registry on `port`, or returns why it cannot (no binary: the Go toolchain was missing at setup). */
export async function startImageRegistry(port: number): Promise<ImageRegistry | string> {
  const binary = registryBinary();
  if (
    !(await access(binary).then(
      () => true,
      () => false
    ))
  )
    return `no image registry binary at ${binary}`;
  const dir = await mkdtemp(path.join(tmpdir(), 'rollout-registry-'));
  const address = `127.0.0.1:${port}`;
  const config = path.join(dir, 'config.yml');
  await writeFile(
    config,
    [
      'version: 0.1',
      'log:',
      '  level: warn',
      'storage:',
      '  filesystem:',
      `    rootdirectory: ${dir}/data`,
      'http:',
      `  addr: ${address}`,
      '',
    ].join('\n')
  );
  const child: ChildProcess = spawn(binary, ['serve', config], { stdio: 'ignore' });
  await waitFor(
    `the image registry on ${address}`,
    () =>
      fetch(`http://${address}/v2/`).then(
        (response) => response.ok,
        () => false
      ),
    30_000
  );
  return {
    address,
    async tags(repository) {
      const response = await fetch(`http://${address}/v2/${repository}/tags/list`);
      if (!response.ok) return [];
      return ((await response.json()) as { tags?: string[] | null }).tags ?? [];
    },
    async stop() {
      child.kill('SIGTERM');
      await rm(dir, { recursive: true, force: true });
    },
  };
}
