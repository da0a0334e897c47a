/**
 * Rollout's Dockerfile frontend: BuildKit's own Dockerfile frontend 1.4.3 (heredocs: `RUN <<EOF`, `COPY <<EOF`), built
 * from the Go module proxy into a local image the first time a job's Dockerfile needs it. Debian's Docker 20.10 has a
 * built-in frontend without heredocs, and a `# syntax=` line would pull docker/dockerfile from a registry; the
 * engine's BuildKit takes a frontend image that is on the host instead (BUILDKIT_SYNTAX, which also overrides a
 * Dockerfile's `# syntax=` line). Nothing of the host's dockerd changes.
 */
import { existsSync } from 'node:fs';
import { chmod, cp, mkdir, mkdtemp, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

import { ifPresent } from '../../files/absent';
import { hostCacheDir } from '../../host-cache';
import { LineTail, runCommand } from '../cli-command';
import { DockerEngine } from '../docker/engine';

/** The BuildKit release whose frontend is docker/dockerfile:1.4.3. */
const BUILDKIT_VERSION = 'v0.10.6';
export const DEFAULT_DOCKERFILE_FRONTEND = 'rollout-dockerfile-frontend:1.4.3';
/** A cold build (module download and compile) takes minutes on two cores; a hung one must not hold trials for ever. */
const BUILD_LIMIT_MS = 30 * 60_000;
const LOCK_POLL_MS = 1000;
/** Docker 23 and later ship a built-in Dockerfile frontend with heredocs. */
const HEREDOC_ENGINE_MAJOR = 23;

/** The frontend image builds use: ROLLOUT_DOCKERFILE_FRONTEND overrides it; empty turns it off (null). */
export function dockerfileFrontendImage(): string | null {
  const image = process.env.ROLLOUT_DOCKERFILE_FRONTEND ?? DEFAULT_DOCKERFILE_FRONTEND;
  return image === '' ? null : image;
}

/** A heredoc's opening line (`RUN <<EOF`, `COPY <<-"EOT" /file`). */
export const HEREDOC_LINE = /^\s*[A-Za-z]+\s.*<<-?\s*["']?[A-Za-z_]/;
export const SYNTAX_LINE = /^#\s*syntax\s*=/i;

/**
 * Why this Dockerfile needs Rollout's frontend on an engine of this version ("line 2: RUN <<EOF"), or null: a
 * `# syntax=` line always does (no registry to pull its frontend from), a heredoc before Docker 23.
 */
export function frontendNeed(dockerfile: string, engineVersion: string): string | null {
  const lines = dockerfile.split('\n');
  const syntax = lines.findIndex((line) => SYNTAX_LINE.test(line));
  if (syntax >= 0) return `line ${syntax + 1}: ${lines[syntax]?.trim()}`;
  if (Number.parseInt(engineVersion, 10) >= HEREDOC_ENGINE_MAJOR) return null;
  const heredoc = lines.findIndex((line) => HEREDOC_LINE.test(line));
  return heredoc >= 0 ? `line ${heredoc + 1}: ${lines[heredoc]?.trim()}` : null;
}

/** Builds in progress in this process, per Docker host and image: concurrent trials wait for the same one. */
const inFlight = new Map<string, Promise<void>>();

/**
 * Makes sure the Docker host has the frontend image, building it once (the compiled frontend is cached per host under
 * ~/.cache/rollout, and a lock file keeps other processes on this host from building it at the same time). Progress
 * lines go to `progress`. A failure is an infrastructure error (a plain Error) naming what failed.
 */
export function ensureDockerfileFrontend(
  engine: DockerEngine,
  image: string,
  progress: (line: string) => void
): Promise<void> {
  const key = `${engine.dockerHost()}\n${image}`;
  let build = inFlight.get(key);
  if (!build) {
    build = buildFrontend(engine, image, progress).finally(() => inFlight.delete(key));
    inFlight.set(key, build);
  } else {
    progress(`waiting for the Dockerfile frontend ${image} another build of this process is making`);
  }
  return build;
}

async function buildFrontend(engine: DockerEngine, image: string, progress: (line: string) => void): Promise<void> {
  const cacheDir = path.join(hostCacheDir(), `dockerfile-frontend-${BUILDKIT_VERSION}`);
  const binary = path.join(cacheDir, 'dockerfile-frontend');
  const started = Date.now();
  const signal = AbortSignal.timeout(BUILD_LIMIT_MS);
  try {
    await mkdir(cacheDir, { recursive: true });
    await withLock(path.join(cacheDir, 'lock'), signal, progress, async () => {
      if (await engine.imageLabels(image)) return;
      if (!(await ifPresent(stat(binary)))) {
        progress(
          `building the Dockerfile frontend ${image} (BuildKit ${BUILDKIT_VERSION}, for heredocs and # syntax= lines) ` +
            'from the Go module proxy: a few minutes, once per host'
        );
        await compileFrontend(binary, signal);
      }
      await frontendImage(engine, binary, image, signal);
    });
  } catch (err) {
    throw new Error(`the Dockerfile frontend ${image} could not be built: ${(err as Error).message}`, { cause: err });
  }
  progress(`Dockerfile frontend ${image} ready (${Math.round((Date.now() - started) / 1000)} s)`);
}

/** `go build` of the frontend's command from BuildKit's module, into `binary` (written whole or not at all). */
async function compileFrontend(binary: string, signal: AbortSignal): Promise<void> {
  const go = goToolchain();
  const work = await mkdtemp(path.join(tmpdir(), 'rollout-frontend-'));
  try {
    const download = await run(go, ['mod', 'download', '-json', `github.com/moby/buildkit@${BUILDKIT_VERSION}`], {
      cwd: work,
      signal,
    });
    const moduleDir = (JSON.parse(download) as { Dir?: string }).Dir;
    if (!moduleDir) throw new Error(`go mod download named no folder for buildkit ${BUILDKIT_VERSION}`);
    // The module cache is read-only, and its zip keeps only vendor/modules.txt: build a writable copy without it.
    const source = path.join(work, 'src');
    await cp(moduleDir, source, { recursive: true });
    await run('chmod', ['-R', 'u+w', source], { cwd: work, signal });
    await rm(path.join(source, 'vendor'), { recursive: true, force: true });
    const output = path.join(work, 'dockerfile-frontend');
    await run(
      go,
      [
        'build',
        '-mod=mod',
        '-trimpath',
        '-ldflags',
        '-s -w',
        '-tags',
        'netgo static_build osusergo',
        '-o',
        output,
        './frontend/dockerfile/cmd/dockerfile-frontend',
      ],
      { cwd: source, signal, env: { CGO_ENABLED: '0' } }
    );
    await rename(output, binary).catch(async () => {
      // Another file system (tmp on tmpfs): copy next to the target, then rename into place.
      await cp(output, `${binary}.partial`);
      await chmod(`${binary}.partial`, 0o755);
      await rename(`${binary}.partial`, binary);
    });
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

/** The image: the binary alone, as its entrypoint, with no network (BuildKit's label for frontends). */
async function frontendImage(engine: DockerEngine, binary: string, image: string, signal: AbortSignal): Promise<void> {
  const context = await mkdtemp(path.join(tmpdir(), 'rollout-frontend-image-'));
  try {
    await cp(binary, path.join(context, 'dockerfile-frontend'));
    await writeFile(
      path.join(context, 'Dockerfile'),
      [
        'FROM scratch',
        'COPY dockerfile-frontend /bin/dockerfile-frontend',
        'LABEL moby.buildkit.frontend.network.none="true"',
        'ENTRYPOINT ["/bin/dockerfile-frontend"]',
        '',
      ].join('\n')
    );
    await run('docker', ['buildx', 'build', '--load', '--quiet', '--tag', image, context], {
      cwd: context,
      signal,
      env: { DOCKER_HOST: engine.dockerHost() },
    });
  } finally {
    await rm(context, { recursive: true, force: true });
  }
}

function goToolchain(): string {
  const onPath = (process.env.PATH ?? '').split(path.delimiter).find((dir) => dir && existsSync(path.join(dir, 'go')));
  if (onPath) return path.join(onPath, 'go');
  if (existsSync('/usr/local/go/bin/go')) return '/usr/local/go/bin/go';
  throw new Error('no Go toolchain on this host to build it (install Go >= 1.21, or build it elsewhere and load it)');
}

/** A command's stdout; a non-zero exit is an error carrying its last lines of output. */
async function run(
  command: string,
  args: string[],
  options: { cwd: string; signal: AbortSignal; env?: Record<string, string> }
): Promise<string> {
  let stdout = '';
  const output = new LineTail(10);
  const code = await runCommand(command, args, {
    signal: options.signal,
    // GOTOOLCHAIN=auto: a Go older than the module's go line fetches the right toolchain from the module proxy.
    env: { GOTOOLCHAIN: 'auto', GOFLAGS: '-mod=mod', ...options.env },
    cwd: options.cwd,
    onOutput: (text) => output.add(text),
    onStdout: (text) => {
      stdout += text;
    },
  });
  if (options.signal.aborted) throw new Error(`${command} ${args[0]} exceeded ${BUILD_LIMIT_MS / 60_000} minutes`);
  if (code !== 0) {
    throw new Error(
      `${path.basename(command)} ${args[0]} exited ${code}: ${output.text() || stdout.trim() || '(no output)'}`
    );
  }
  return stdout;
}

/**
 * Runs `work` holding a lock folder: one process of this host builds, the others wait and then find the image. A lock
 * whose holder died is taken over.
 */
async function withLock(
  lock: string,
  signal: AbortSignal,
  progress: (line: string) => void,
  work: () => Promise<void>
): Promise<void> {
  let told = false;
  for (;;) {
    try {
      await mkdir(lock);
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    const holder = Number((await ifPresent(readFile(path.join(lock, 'pid'), 'utf8'))) ?? '');
    if (holder > 0 && !alive(holder)) {
      await rm(lock, { recursive: true, force: true });
      continue;
    }
    if (!told) progress(`waiting for process ${holder || '?'} of this host, which is building the Dockerfile frontend`);
    told = true;
    await sleep(LOCK_POLL_MS, undefined, { signal });
  }
  try {
    await writeFile(path.join(lock, 'pid'), String(process.pid));
    await work();
  } finally {
    await rm(lock, { recursive: true, force: true });
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** scripts/setup-tests.sh: the frontend ahead of the tests, on this host's Docker engine. */
export async function prepareDockerfileFrontend(): Promise<void> {
  const image = dockerfileFrontendImage();
  if (!image) return;
  const engine = new DockerEngine({ hostId: 'setup', deployment: 'none' });
  if (await engine.imageLabels(image)) {
    console.log(`[setup-tests] Dockerfile frontend ${image} present`);
    return;
  }
  await ensureDockerfileFrontend(engine, image, (line) => console.log(`[setup-tests] ${line}`));
}
