import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';

import type { Problem } from '../contracts/errors';
import { InputError, zodProblems } from '../contracts/errors';
import type { RegistryDataset } from '../contracts/registry';
import { RegistrySchema } from '../contracts/registry';

/** Where a registry comes from: a registry.json on disk, one served over HTTP, or (neither) the default. */
export type RegistrySource = { path: string } | { url: string } | undefined;

/** The registry shipped with Rollout: the datasets of Harbor's public registry, with their repositories and commits. */
export const DEFAULT_REGISTRY_FILE = findUp(path.join('registry', 'default.json'));

const FETCH_TIMEOUT_MS = 60_000;

/** The default registry unless ROLLOUT_REGISTRY_URL names another (a URL or a file). */
export function defaultRegistrySource(): { path: string } | { url: string } {
  const override = process.env.ROLLOUT_REGISTRY_URL;
  return override ? registrySource(override) : { path: DEFAULT_REGISTRY_FILE };
}

/** A registry named on the command line or in the environment: a URL when it has a scheme, else a file. */
export function registrySource(pathOrUrl: string): { path: string } | { url: string } {
  return /^[a-z][a-z0-9+.-]*:\/\//i.test(pathOrUrl) ? { url: pathOrUrl } : { path: path.resolve(pathOrUrl) };
}

export function registryLabel(source: RegistrySource): string {
  const resolved = source ?? defaultRegistrySource();
  return 'url' in resolved ? resolved.url : resolved.path;
}

/** Reads and validates a registry; every problem names the registry and the offending entry. */
export async function readRegistry(source: RegistrySource): Promise<RegistryDataset[]> {
  const resolved = source ?? defaultRegistrySource();
  const label = registryLabel(resolved);
  let text: string;
  try {
    text = 'url' in resolved ? await fetchText(resolved.url) : await readFile(resolved.path, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw new InputError([
      { file: label, message: code === 'ENOENT' ? 'no such file' : `unreadable: ${(err as Error).message}` },
    ]);
  }
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    throw new InputError([{ file: label, message: `invalid JSON: ${(err as Error).message.split('\n')[0]}` }]);
  }
  const parsed = RegistrySchema.safeParse(raw);
  if (!parsed.success) throw new InputError(zodProblems(label, parsed.error.issues));
  return parsed.data;
}

async function fetchText(url: string): Promise<string> {
  const response = await fetch(url, { signal: AbortSignal.timeout(FETCH_TIMEOUT_MS) });
  if (!response.ok) throw new Error(`HTTP ${response.status} ${response.statusText}`);
  return response.text();
}

/**
 * The dataset of that name and version. Without a version, the name must have exactly one. A miss lists what the
 * registry has, so the user can pick.
 */
export function findDataset(
  registry: RegistryDataset[],
  wanted: { name: string; version?: string },
  where: { file: string; field: string }
): RegistryDataset | Problem {
  const named = registry.filter((dataset) => dataset.name === wanted.name);
  if (named.length === 0) {
    const names = [...new Set(registry.map((dataset) => dataset.name))].sort();
    return {
      file: where.file,
      field: `${where.field}.name`,
      message: `no dataset "${wanted.name}" in the registry; it has: ${names.join(', ')}`,
    };
  }
  const versions = named.map((dataset) => dataset.version);
  const match =
    wanted.version === undefined
      ? named.length === 1
        ? named[0]
        : undefined
      : named.find((d) => d.version === wanted.version);
  if (match) return match;
  return {
    file: where.file,
    field: `${where.field}.version`,
    message:
      wanted.version === undefined
        ? `dataset "${wanted.name}" has several versions, pick one: ${versions.join(', ')}`
        : `dataset "${wanted.name}" has no version "${wanted.version}"; it has: ${versions.join(', ')}`,
  };
}

/** A file shipped in the package, found from the compiled (dist/src/…) or the source location alike. */
function findUp(relative: string): string {
  let dir = __dirname;
  for (;;) {
    const candidate = path.join(dir, relative);
    if (existsSync(candidate)) return candidate;
    const parent = path.dirname(dir);
    if (parent === dir) return path.join(__dirname, relative);
    dir = parent;
  }
}
