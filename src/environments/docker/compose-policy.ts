/**
 * What a task's docker-compose.yaml may ask for. Tasks come from public datasets, so the file is allowed key by key
 * (deny by default): services built from the task's own folder or run from an image, with their env, command,
 * healthcheck, dependencies, named volumes and the project's own networks. Anything that reaches the host (bind
 * mounts, the Docker socket, `privileged`, capabilities, devices, the host's pid/ipc/network namespaces, published
 * ports, external networks and volumes, files outside the task, re-tagging images) is refused with the file and field.
 *
 * Two passes: `rawComposeProblems` before compose reads anything (env_file, extends and include read host files
 * while the model is resolved), then `modelProblems` on the model compose resolved (merges, paths, interpolation).
 */
import { realpath } from 'node:fs/promises';
import path from 'node:path';
import { isDeepStrictEqual } from 'node:util';

import { parse as parseYaml } from 'yaml';
import { ifPresent } from '../../files/absent';
import { DROPPED_CAPABILITIES } from '../trial-container';

/** The parts of a resolved compose model (`docker compose config --format json`) Rollout reads or changes. */
export interface ComposeModel {
  name?: string;
  services: Record<string, ComposeService>;
  networks?: Record<string, ComposeResource | null>;
  volumes?: Record<string, ComposeResource | null>;
  [key: string]: unknown;
}

export interface ComposeService {
  image?: string;
  build?: { labels?: Record<string, string> } & Record<string, unknown>;
  labels?: Record<string, string>;
  pull_policy?: string;
  [key: string]: unknown;
}

export interface ComposeResource {
  external?: boolean;
  labels?: Record<string, string>;
  [key: string]: unknown;
}

/** Service keys a task may set; each value is checked further where it could reach the host (see serviceProblems). */
const SERVICE_KEYS = new Set([
  'image',
  'build',
  'command',
  'entrypoint',
  'environment',
  'healthcheck',
  'depends_on',
  'expose',
  'working_dir',
  'user',
  'labels',
  'networks',
  'volumes',
  'tmpfs',
  'restart',
  'stop_signal',
  'stop_grace_period',
  'init',
  'hostname',
  'domainname',
  'tty',
  'stdin_open',
  'extra_hosts',
  'profiles',
  'platform',
  'pull_policy',
  'read_only',
  'cap_drop',
  'ulimits',
  'links',
  // Limits: capped to the trial's own afterwards (hardenService).
  'mem_limit',
  'memswap_limit',
  'mem_reservation',
  'cpus',
  'cpu_shares',
  'pids_limit',
  'shm_size',
  'deploy',
  // Rollout's own on main (the task's are replaced by Rollout's, see ComposeMain).
  'storage_opt',
  'network_mode',
]);

const BUILD_KEYS = new Set([
  'context',
  'dockerfile',
  'dockerfile_inline',
  'args',
  'target',
  'labels',
  'no_cache',
  'pull',
  'extra_hosts',
  'shm_size',
]);

const ULIMITS = new Set(['nofile', 'core', 'stack', 'memlock']);
const NETWORK_KEYS = new Set(['name', 'driver', 'internal', 'labels', 'ipam', 'enable_ipv6']);
const VOLUME_KEYS = new Set(['name', 'driver', 'labels']);

/** A refusal: the field (`services.side.pid`) and why. */
export interface ComposeProblem {
  field: string;
  message: string;
}

/**
 * The task's compose file as written, before compose reads it: `include`, and `env_file` / `extends.file` outside the
 * task folder, would make compose read host files into the model (a worker's ~/.env, /proc/self/environ).
 */
export async function rawComposeProblems(
  text: string,
  composeFile: string,
  taskDir: string
): Promise<ComposeProblem[]> {
  let raw: unknown;
  try {
    raw = parseYaml(text, { merge: true, maxAliasCount: 1000 });
  } catch (err) {
    return [{ field: '(file)', message: `invalid YAML: ${(err as Error).message.split('\n')[0]}` }];
  }
  if (!isRecord(raw)) return [{ field: '(file)', message: 'not a mapping' }];
  const problems: ComposeProblem[] = [];
  if (raw.include !== undefined)
    problems.push({ field: 'include', message: 'not allowed (a task has one compose file)' });
  const dir = path.dirname(composeFile);
  for (const [name, service] of Object.entries(isRecord(raw.services) ? raw.services : {})) {
    if (!isRecord(service)) continue;
    const envFiles = [service.env_file].flat().flatMap((entry) => {
      if (typeof entry === 'string') return [entry];
      if (isRecord(entry) && typeof entry.path === 'string') return [entry.path];
      return [];
    });
    for (const file of envFiles) {
      if (!(await insideTask(taskDir, path.resolve(dir, file)))) {
        problems.push({ field: `services.${name}.env_file`, message: `${file} is outside the task folder` });
      }
    }
    if (isRecord(service.extends) && service.extends.file !== undefined) {
      problems.push({ field: `services.${name}.extends.file`, message: 'not allowed (extend a service of this file)' });
    }
  }
  return problems;
}

/**
 * The resolved model's refusals (see the module's comment); `project` is the compose project's name, `main` the main
 * service as Rollout wrote it (its values are not the task's, so not judged).
 */
export async function modelProblems(
  model: ComposeModel,
  project: string,
  taskDir: string,
  main: Record<string, unknown>
): Promise<ComposeProblem[]> {
  const problems: ComposeProblem[] = [];
  for (const key of Object.keys(model)) {
    if (!['name', 'services', 'networks', 'volumes'].includes(key) && !key.startsWith('x-')) {
      problems.push({ field: key, message: 'not allowed' });
    }
  }
  for (const [name, network] of Object.entries(model.networks ?? {})) {
    problems.push(...resourceProblems(`networks.${name}`, network, NETWORK_KEYS, `${project}_${name}`));
    if (network?.driver !== undefined && network.driver !== 'bridge') {
      problems.push({ field: `networks.${name}.driver`, message: 'only bridge' });
    }
    if (isRecord(network?.ipam) && Object.keys(network.ipam).length > 0) {
      problems.push({ field: `networks.${name}.ipam`, message: 'not allowed' });
    }
  }
  for (const [name, volume] of Object.entries(model.volumes ?? {})) {
    problems.push(...resourceProblems(`volumes.${name}`, volume, VOLUME_KEYS, `${project}_${name}`));
    if (volume?.driver !== undefined && volume.driver !== 'local') {
      problems.push({ field: `volumes.${name}.driver`, message: 'only local' });
    }
  }
  const services = Object.keys(model.services);
  for (const [name, service] of Object.entries(model.services)) {
    // Main's values that are Rollout's are not the task's; what the task set there is judged like any service's.
    const judged = name === 'main' ? withoutRollouts(service, main) : service;
    problems.push(...(await serviceProblems(`services.${name}`, judged, { model, services, taskDir })));
  }
  return problems;
}

function resourceProblems(
  field: string,
  resource: ComposeResource | null,
  allowed: Set<string>,
  ownName: string
): ComposeProblem[] {
  if (!resource) return [];
  const problems = Object.keys(resource)
    .filter((key) => !allowed.has(key))
    .map((key) => ({ field: `${field}.${key}`, message: 'not allowed' }));
  // A name of its own would join (or create) a network or volume outside the trial's project: another trial's, the
  // host's `bridge`.
  if (resource.name !== undefined && resource.name !== ownName) {
    problems.push({ field: `${field}.name`, message: `not allowed (the project's own is ${ownName})` });
  }
  return problems;
}

async function serviceProblems(
  field: string,
  service: ComposeService,
  context: { model: ComposeModel; services: string[]; taskDir: string }
): Promise<ComposeProblem[]> {
  const problems: ComposeProblem[] = [];
  const refuse = (key: string, message = 'not allowed') => problems.push({ field: `${field}.${key}`, message });
  for (const key of Object.keys(service)) {
    if (!SERVICE_KEYS.has(key) && !key.startsWith('x-')) refuse(key);
  }
  if (service.network_mode !== undefined && service.network_mode !== 'none') refuse('network_mode', 'only none');
  for (const [index, volume] of asArray(service.volumes).entries()) {
    const type = isRecord(volume) ? volume.type : undefined;
    if (type === 'tmpfs') continue;
    const source = isRecord(volume) ? volume.source : undefined;
    const named = typeof source === 'string' && context.model.volumes?.[source] !== undefined;
    if (type !== 'volume' || (source !== undefined && !named)) {
      refuse(`volumes.${index}`, `only the project's named volumes and tmpfs (not a ${String(type)} mount)`);
    }
  }
  for (const network of Object.keys(isRecord(service.networks) ? service.networks : {})) {
    if (context.model.networks?.[network] === undefined) refuse(`networks.${network}`, "not one of the project's");
  }
  for (const [name, value] of Object.entries(isRecord(service.networks) ? service.networks : {})) {
    for (const key of Object.keys(isRecord(value) ? value : {})) {
      if (key !== 'aliases') refuse(`networks.${name}.${key}`);
    }
  }
  for (const link of asArray(service.links)) {
    if (typeof link !== 'string' || !context.services.includes(link.split(':')[0]!))
      refuse('links', "only the project's services");
  }
  for (const limit of Object.keys(isRecord(service.ulimits) ? service.ulimits : {})) {
    if (!ULIMITS.has(limit)) refuse(`ulimits.${limit}`);
  }
  if (service.deploy !== undefined) problems.push(...deployProblems(`${field}.deploy`, service.deploy));
  if (service.build !== undefined)
    problems.push(...(await buildProblems(`${field}.build`, service.build, context.taskDir)));
  return problems;
}

function deployProblems(field: string, deploy: unknown): ComposeProblem[] {
  if (!isRecord(deploy)) return [{ field, message: 'not a mapping' }];
  const problems: ComposeProblem[] = [];
  for (const [key, value] of Object.entries(deploy)) {
    if (key !== 'resources') {
      problems.push({ field: `${field}.${key}`, message: 'not allowed' });
      continue;
    }
    for (const [kind, limits] of Object.entries(isRecord(value) ? value : {})) {
      for (const limit of Object.keys(isRecord(limits) ? limits : {})) {
        // Devices (GPUs) are Rollout's to give: main gets the task.toml's; a sidecar none.
        if (!['cpus', 'memory', 'pids'].includes(limit)) {
          problems.push({ field: `${field}.resources.${kind}.${limit}`, message: 'not allowed' });
        }
      }
    }
  }
  return problems;
}

async function buildProblems(field: string, build: unknown, taskDir: string): Promise<ComposeProblem[]> {
  if (!isRecord(build)) return [{ field, message: 'not a mapping' }];
  const problems: ComposeProblem[] = [];
  for (const key of Object.keys(build)) {
    if (BUILD_KEYS.has(key)) continue;
    const why =
      key === 'tags'
        ? 'not allowed (Rollout tags what it builds; other tags would replace images on this host)'
        : 'not allowed';
    problems.push({ field: `${field}.${key}`, message: why });
  }
  const context = typeof build.context === 'string' ? build.context : '';
  if (!path.isAbsolute(context) || !(await insideTask(taskDir, context))) {
    problems.push({ field: `${field}.context`, message: `${context || '(none)'} is outside the task folder` });
  } else if (
    typeof build.dockerfile === 'string' &&
    !(await insideTask(taskDir, path.resolve(context, build.dockerfile)))
  ) {
    problems.push({ field: `${field}.dockerfile`, message: `${build.dockerfile} is outside the task folder` });
  }
  return problems;
}

/**
 * Whether `file` stays inside the task folder once links are resolved; one that does not exist yet is judged by the
 * nearest folder above it that does.
 */
export async function insideTask(taskDir: string, file: string): Promise<boolean> {
  const root = (await ifPresent(realpath(taskDir))) ?? path.resolve(taskDir);
  let candidate = path.resolve(file);
  let rest = '';
  for (;;) {
    try {
      const real = path.join(await realpath(candidate), rest);
      const relative = path.relative(root, real);
      return relative === '' || (!relative.startsWith('..') && !path.isAbsolute(relative));
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if ((code !== 'ENOENT' && code !== 'ENOTDIR') || path.dirname(candidate) === candidate) return false;
      rest = path.join(path.basename(candidate), rest);
      candidate = path.dirname(candidate);
    }
  }
}

/** Main's keys the task did not change: Rollout's values (as compose normalized them), and Rollout's own keys. */
function withoutRollouts(service: ComposeService, main: Record<string, unknown>): ComposeService {
  const rollouts = (key: string) =>
    main[key] !== undefined &&
    (['deploy', 'storage_opt', 'cpus', 'mem_limit', 'memswap_limit', 'pids_limit', 'image'].includes(key) ||
      isDeepStrictEqual(service[key], main[key]));
  return Object.fromEntries(Object.entries(service).filter(([key]) => !rollouts(key)));
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function asArray(value: unknown): unknown[] {
  return Array.isArray(value) ? value : [];
}

/** Keys of main that are Rollout's: the task's values are replaced by Rollout's (or removed when it sets none). */
const MAIN_OWNED = [
  'image',
  'build',
  'cpus',
  'mem_limit',
  'memswap_limit',
  'pids_limit',
  'storage_opt',
  'deploy',
  'network_mode',
  'shm_size',
];

export const SECURITY_OPTIONS = ['no-new-privileges:true'];

/**
 * After the checks: main's limits, image and network are Rollout's again; no sidecar gets more CPU, memory or pids than
 * the trial has; every service runs without NET_RAW and MKNOD, and with no-new-privileges.
 */
export function hardenModel(
  model: ComposeModel,
  main: Record<string, unknown>,
  limits: { cpus: number; memoryBytes: number; pidsLimit: number }
): void {
  for (const [name, service] of Object.entries(model.services)) {
    if (name === 'main') {
      for (const key of MAIN_OWNED) {
        if (main[key] === undefined) delete service[key];
        else service[key] = main[key];
      }
    } else {
      const declared = isRecord(service.deploy) && isRecord(service.deploy.resources) ? service.deploy.resources : {};
      const declaredLimits = isRecord(declared.limits) ? declared.limits : {};
      delete service.deploy;
      service.cpus = Math.min(numberOr(service.cpus ?? declaredLimits.cpus, limits.cpus), limits.cpus);
      const memory = Math.min(
        numberOr(service.mem_limit ?? declaredLimits.memory, limits.memoryBytes),
        limits.memoryBytes
      );
      service.mem_limit = Math.round(memory);
      service.memswap_limit = Math.round(memory);
      service.pids_limit = Math.min(
        numberOr(service.pids_limit ?? declaredLimits.pids, limits.pidsLimit),
        limits.pidsLimit
      );
      if (service.shm_size !== undefined) service.shm_size = Math.min(numberOr(service.shm_size, memory), memory);
    }
    service.cap_drop = [...new Set([...asArray(service.cap_drop).map(String), ...DROPPED_CAPABILITIES])];
    service.security_opt = SECURITY_OPTIONS;
  }
}

/** A compose quantity as resolved (a number, or bytes as a string); `fallback` when absent or not a plain number. */
function numberOr(value: unknown, fallback: number): number {
  const number = typeof value === 'number' ? value : typeof value === 'string' ? Number(value) : NaN;
  return Number.isFinite(number) && number > 0 ? number : fallback;
}
