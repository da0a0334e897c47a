/**
 * Harbor's multi-container tasks: environment/docker-compose.yaml adds services (sidecars) and overrides to a `main`
 * service, which is the trial's container (the agent and, in shared mode, the verifier run there). A mode of the
 * docker environment, as in Harbor: the same images, exec, upload and download; only start and clean-up differ. Run
 * through the real Docker Compose v2 CLI (`docker compose`), one project, and so one network, per trial.
 */
import { createHash } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';

import { LineTail, runCommand } from '../cli-command';
import { TaskEnvironmentError } from '../../contracts/environment';
import type { ComposeModel, ComposeProblem, ComposeService } from './compose-policy';
import { hardenModel, modelProblems, rawComposeProblems } from './compose-policy';
import { ifPresent } from '../../files/absent';
import { CONTAINER_PATHS } from '../../contracts/paths';

/** The service that is the trial's container. */
export const MAIN_SERVICE = 'main';
/** Docker Compose's own labels on what it creates. */
export const LABEL_COMPOSE_PROJECT = 'com.docker.compose.project';
export const LABEL_COMPOSE_SERVICE = 'com.docker.compose.service';
const OUTPUT_LINES = 40;

/** The task's docker-compose.yaml (or .yml) in its environment/ folder, or null. */
export async function taskComposeFile(environmentDir: string): Promise<string | null> {
  const files = (await ifPresent(readdir(environmentDir))) ?? [];
  const name = ['docker-compose.yaml', 'docker-compose.yml'].find((file) => files.includes(file));
  return name ? path.join(environmentDir, name) : null;
}

/** Where a sidecar's image is tagged: per environment key, so identical environments share it. */
export function sidecarImage(mainImageTag: string, service: string): string {
  return `${mainImageTag}-svc-${service.toLowerCase().replace(/[^a-z0-9_.-]/g, '_')}`;
}

/** `rollout-<trial name>-<hash of the trial id>`, as compose accepts project names (lowercase). */
export function projectName(trialName: string, trialId: string): string {
  const digest = createHash('sha256').update(trialId).digest('hex').slice(0, 8);
  const readable = trialName
    .toLowerCase()
    .replace(/[^a-z0-9_-]/g, '_')
    .slice(0, 40);
  return `rollout-${readable}-${digest}`;
}

/** Harbor's legacy log-folder variables (HOST_/ENV_<name>_PATH) and the folder of main each stands for. */
const LOG_FOLDERS = {
  AGENT_LOGS: CONTAINER_PATHS.agentLogs,
  VERIFIER_LOGS: CONTAINER_PATHS.verifierLogs,
  ARTIFACTS: CONTAINER_PATHS.artifacts,
};

/** What Harbor's compose infra variables stand for in one trial (or one build). */
export interface ComposeInfra {
  /** environment/: CONTEXT_DIR. */
  contextDir: string;
  /** The main image: MAIN_IMAGE_NAME, and PREBUILT_IMAGE_NAME when it is the task's docker_image (no Dockerfile). */
  mainImage: string;
  prebuilt: boolean;
  cpus: number;
  memoryBytes: number;
  /** The task's [environment.env] (and the instruction): interpolation sees them, below the infra variables. */
  taskEnv?: Record<string, string>;
}

/**
 * Harbor's compose infra variables, as it sets them (`ComposeInfraEnvVars`, `legacy_log_mount_env_vars`), so task
 * compose files that interpolate them come up: CONTEXT_DIR, MAIN_IMAGE_NAME, PREBUILT_IMAGE_NAME, CPUS, MEMORY and
 * HOST_/ENV_{AGENT_LOGS,VERIFIER_LOGS,ARTIFACTS}_PATH. Harbor bind-mounts host folders of the trial there; Rollout
 * copies logs out instead, so HOST_<name>_PATH names a volume of the trial's project, mounted on main's folder too
 * (a sidecar that writes to it writes into main's /logs/artifacts, as under Harbor) — only for the variables the
 * task's compose file uses, so other tasks' /logs stay plain folders.
 */
export async function composeInfra(
  composeFile: string,
  infra: ComposeInfra
): Promise<{ variables: Record<string, string>; volumes: Record<string, string> }> {
  const text = await readFile(composeFile, 'utf8');
  const variables: Record<string, string> = {
    ...infra.taskEnv,
    CONTEXT_DIR: path.resolve(infra.contextDir),
    MAIN_IMAGE_NAME: infra.mainImage,
    ...(infra.prebuilt ? { PREBUILT_IMAGE_NAME: infra.mainImage } : {}),
    CPUS: `${Math.max(1, Math.round(infra.cpus))}`,
    MEMORY: `${Math.round(infra.memoryBytes / 2 ** 20)}M`,
  };
  const volumes: Record<string, string> = {};
  for (const [name, folder] of Object.entries(LOG_FOLDERS)) {
    variables[`ENV_${name}_PATH`] = folder;
    if (!new RegExp(`\\bHOST_${name}_PATH\\b`).test(text)) continue;
    const volume = `rollout-${name.toLowerCase().replace(/_/g, '-')}`;
    variables[`HOST_${name}_PATH`] = volume;
    volumes[volume] = folder;
  }
  return { variables, volumes };
}

export interface ComposeContext {
  /** DOCKER_HOST for the CLI: the daemon the environment's dockerode talks to. */
  dockerHost: string;
  /** Harbor's infra variables the compose file may interpolate (over the worker's), and the volumes they name. */
  infra?: { variables: Record<string, string>; volumes: Record<string, string> };
  signal: AbortSignal;
  onOutput?: (line: string) => void;
}

/**
 * Builds the images of services with a `build` section (not main, which the docker environment builds from the
 * task's Dockerfile) that are not built yet, tagged per environment and labelled like Rollout's other images; start
 * finds them by tag.
 */
export async function buildSidecars(
  composeFile: string,
  mainImageTag: string,
  labels: Record<string, string>,
  context: ComposeContext & { isBuilt: (image: string) => Promise<boolean> }
): Promise<void> {
  const model = await resolvedModel(
    composeFile,
    `rollout-build-${hash(mainImageTag)}`,
    { image: mainImageTag },
    context
  );

  const built: [string, ComposeService][] = [];
  for (const [name, service] of Object.entries(model.services)) {
    if (name !== MAIN_SERVICE && service.build && !(await context.isBuilt(sidecarImage(mainImageTag, name)))) {
      built.push([name, service]);
    }
  }
  if (!built.length) return;
  for (const [name, service] of built) {
    // The task's own `image` of a built service is replaced: Rollout chooses every tag a build makes.
    service.image = sidecarImage(mainImageTag, name);
    service.build = {
      ...service.build,
      labels: { ...service.build?.labels, ...labels },
    };
  }
  const names = built.map(([name]) => name);
  const output = await compose(model, ['build', ...names], context);
  if (output.exitCode !== 0) {
    throw new TaskEnvironmentError('EnvironmentBuildError', `docker compose build ${names.join(' ')}: ${output.text}`);
  }
}

export interface ComposeStart {
  composeFile: string;
  project: string;
  /** The main service as Rollout starts it (image, keep-alive, env, limits, labels), before the task's overrides. */
  main: Record<string, unknown>;
  /** The main image's tag before the job's reference was added: sidecars built for it carry it in their tags. */
  mainImageTag: string;
  /** The trial's limits: no sidecar gets more. */
  limits: { cpus: number; memoryBytes: number; pidsLimit: number };
  /** Every container, network and volume of the project gets these (ownership, job, trial). */
  labels: Record<string, string>;
  waitTimeoutSec: number;
}

/**
 * `docker compose up --wait`: every service started, and healthy where it has a healthcheck, before this returns
 * (depends_on conditions order them). On failure the caller removes the project.
 */
export async function composeUp(start: ComposeStart, context: ComposeContext): Promise<void> {
  const model = await resolvedModel(start.composeFile, start.project, escaped(start.main), context);
  hardenModel(model, escaped(start.main), start.limits);
  for (const [name, service] of Object.entries(model.services)) {
    service.labels = { ...service.labels, ...start.labels };
    if (name !== MAIN_SERVICE && service.build) {
      // Built in the build step: start only uses it.
      service.image = sidecarImage(start.mainImageTag, name);
      delete service.build;
    }
    // No container registry is assumed: an image that is not here is a start error, not a hang on a pull.
    service.pull_policy = 'never';
  }
  for (const resources of [model.networks, model.volumes]) {
    for (const [name, resource] of Object.entries(resources ?? {})) {
      if (resource?.external) continue;
      resources![name] = { ...resource, labels: { ...resource?.labels, ...start.labels } };
    }
  }
  const args = ['up', '--detach', '--wait', '--wait-timeout', `${Math.max(1, Math.floor(start.waitTimeoutSec))}`];
  const output = await compose(model, args, context);
  context.signal.throwIfAborted();
  if (output.exitCode !== 0) {
    throw new TaskEnvironmentError('EnvironmentStartError', `docker compose up: ${output.text}`);
  }
}

/** The label filters that find a project's container of a service. */
export function serviceFilter(project: string, service = MAIN_SERVICE): string[] {
  return [`${LABEL_COMPOSE_PROJECT}=${project}`, `${LABEL_COMPOSE_SERVICE}=${service}`];
}

/**
 * The task's compose file over Rollout's main service, resolved by compose itself (merge, paths, interpolation) and
 * checked key by key (src/environments/docker/compose-policy.ts): a refusal is the task's EnvironmentStartError.
 * Compose runs with the task's own env and the infra variables only, never this worker's environment.
 */
async function resolvedModel(
  composeFile: string,
  project: string,
  main: Record<string, unknown>,
  context: ComposeContext
): Promise<ComposeModel> {
  const projectDir = path.dirname(composeFile);
  const taskDir = path.dirname(projectDir);
  const raw = await rawComposeProblems(await readFile(composeFile, 'utf8'), composeFile, taskDir);
  if (raw.length) throw refusal(composeFile, raw);
  const volumes = context.infra?.volumes ?? {};
  const mounts = Object.entries(volumes).map(([name, folder]) => `${name}:${folder}`);
  const base = {
    services: { [MAIN_SERVICE]: mounts.length ? { ...main, volumes: mounts } : main },
    ...(mounts.length ? { volumes: Object.fromEntries(Object.keys(volumes).map((name) => [name, {}])) } : {}),
  };
  const dir = await mkdtemp(path.join(tmpdir(), 'rollout-compose-'));
  try {
    const baseFile = path.join(dir, 'rollout-main.json');
    await writeFile(baseFile, JSON.stringify(base));
    const args = ['-p', project, '--project-directory', projectDir, '-f', baseFile, '-f', composeFile];
    let stdout = '';
    const tail = new LineTail(OUTPUT_LINES);
    const exitCode = await runCommand('docker', ['compose', ...args, 'config', '--format', 'json'], {
      signal: context.signal,
      env: composeEnv(context, context.infra?.variables),
      isolated: true,
      onOutput: (text) => tail.add(text),
      onStdout: (text) => (stdout += text),
    });
    context.signal.throwIfAborted();
    if (exitCode !== 0) {
      throw new TaskEnvironmentError('EnvironmentStartError', `${composeFile}: ${composeMessage(tail.text())}`);
    }
    const model = JSON.parse(stdout) as ComposeModel;
    const problems = await modelProblems(model, project, taskDir, main);
    if (problems.length) throw refusal(composeFile, problems);
    return model;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** The only environment compose sees: the daemon's address and `variables` (never this worker's own). */
function composeEnv(context: ComposeContext, variables: Record<string, string> = {}): Record<string, string> {
  const own = Object.fromEntries(
    Object.entries(variables).filter(([name]) => !/^(DOCKER|COMPOSE|BUILDKIT)_/.test(name))
  );
  return { ...own, DOCKER_HOST: context.dockerHost };
}

/** A compose file Rollout refuses to run: the task's start error, with each refused field. */
export class ComposeRefusal extends TaskEnvironmentError {
  constructor(
    readonly composeFile: string,
    readonly problems: ComposeProblem[]
  ) {
    const lines = problems.slice(0, 10).map((problem) => `${composeFile}: ${problem.field}: ${problem.message}`);
    const more = problems.length > 10 ? ` (and ${problems.length - 10} more)` : '';
    super('EnvironmentStartError', `${lines.join('; ')}${more}`);
  }
}

function refusal(composeFile: string, problems: ComposeProblem[]): ComposeRefusal {
  return new ComposeRefusal(composeFile, problems);
}

/**
 * The task's compose file checked before any trial (the plan): read and resolved as a trial would, with placeholder
 * infra values, and judged key by key. Each refusal names the file and field. Without the docker CLI on this machine
 * only the file itself is checked; the trial's start checks the rest.
 */
export async function composeFileProblems(
  composeFile: string,
  taskEnv: Record<string, string>
): Promise<ComposeProblem[]> {
  const environmentDir = path.dirname(composeFile);
  const infra = await composeInfra(composeFile, {
    contextDir: environmentDir,
    mainImage: 'rollout-plan-check',
    prebuilt: false,
    cpus: 1,
    memoryBytes: 2 ** 30,
    taskEnv,
  });
  const context = {
    dockerHost: process.env.DOCKER_HOST || 'unix:///var/run/docker.sock',
    infra,
    signal: AbortSignal.timeout(60_000),
  };
  try {
    await resolvedModel(composeFile, 'rollout-plan-check', { image: 'rollout-plan-check' }, context);
    return [];
  } catch (err) {
    if (err instanceof ComposeRefusal) return err.problems;
    if (err instanceof TaskEnvironmentError && !/ENOENT|not installed/.test(err.message)) {
      return [{ field: '(file)', message: err.message.slice(composeFile.length + 2) }];
    }
    return [];
  }
}

/** Runs `docker compose <args>` over a resolved model (written to a file of its own). */
async function compose(
  model: ComposeModel,
  args: string[],
  context: ComposeContext
): Promise<{ exitCode: number; text: string }> {
  const dir = await mkdtemp(path.join(tmpdir(), 'rollout-compose-'));
  try {
    const file = path.join(dir, 'compose.json');
    await writeFile(file, JSON.stringify(model));
    const tail = new LineTail(OUTPUT_LINES, context.onOutput);
    const project = model.name ? ['-p', model.name] : [];
    const exitCode = await runCommand('docker', ['compose', ...project, '-f', file, ...args], {
      signal: context.signal,
      env: composeEnv(context),
      isolated: true,
      onOutput: (text) => tail.add(text),
    });
    if (exitCode !== 0 && /'compose' is not a docker command|unknown command: docker compose/.test(tail.text())) {
      throw new Error('docker compose (v2) is not installed on this worker (scripts/setup.sh installs it)');
    }
    return { exitCode, text: composeMessage(tail.text()) };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** Compose's own error lines when it printed some, else its last lines. */
function composeMessage(output: string): string {
  const errors = output.split('\n').filter((line) => /error|invalid|unhealthy|failed|not found/i.test(line));
  return (errors.length ? errors.slice(-5) : output.split('\n').slice(-10)).join('\n').trim();
}

/** Rollout's values reach compose literally: `$` would be interpolated. */
function escaped<T>(value: T): T {
  if (typeof value === 'string') return value.replace(/\$/g, '$$$$') as T;
  if (Array.isArray(value)) return value.map(escaped) as T;
  if (value && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([key, inner]) => [key, escaped(inner)])) as T;
  }
  return value;
}

function hash(text: string): string {
  return createHash('sha256').update(text).digest('hex').slice(0, 12);
}
