/**
 * Kubernetes quantity expressions ("500m", "1", "2G", "256Mi", "1.5Gi", "1e3"), as task.toml and job.yaml use
 * them for cpus, memory and storage.
 * https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/quantity/
 */
import { z } from 'zod';

const SUFFIX_MULTIPLIERS: Record<string, number> = {
  n: 1e-9,
  u: 1e-6,
  m: 1e-3,
  '': 1,
  k: 1e3,
  M: 1e6,
  G: 1e9,
  T: 1e12,
  P: 1e15,
  E: 1e18,
  Ki: 2 ** 10,
  Mi: 2 ** 20,
  Gi: 2 ** 30,
  Ti: 2 ** 40,
  Pi: 2 ** 50,
  Ei: 2 ** 60,
};

const QUANTITY = /^\+?((?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?)$/;

/** Parses a quantity into its value in base units; throws with a message naming the accepted syntax. */
export function parseQuantity(text: string): number {
  const match = QUANTITY.exec(text.trim());
  if (!match) {
    throw new Error(`"${text}" is not a quantity (examples: 1, 500m, 2G, 256Mi, 1.5Gi)`);
  }
  const [, digits, exponent, suffix] = match;
  const value = Number(digits) * (exponent ? 10 ** Number(exponent.slice(1)) : SUFFIX_MULTIPLIERS[suffix ?? '']!);
  if (!Number.isFinite(value) || value <= 0) {
    throw new Error(`"${text}" must be a positive quantity`);
  }
  return value;
}

/** A quantity as the Kubernetes API writes it (node allocatable, pod requests): bare numbers are units, 0 is 0. */
export function apiQuantity(text: string): number {
  return /^\s*0*\s*$/.test(text) ? 0 : parseQuantity(text);
}

/** CPU count: "1", "0.5", "500m", or a number. */
export function parseCpus(value: string | number): number {
  return typeof value === 'number' ? positive(value, String(value)) : parseQuantity(value);
}

/**
 * Bytes of memory or storage. A bare number means megabytes, as the spec's own example (`memory = "2048"`) intends;
 * any suffix follows Kubernetes.
 */
export function parseBytes(value: string | number): number {
  if (typeof value === 'number') return positive(value, String(value)) * 1e6;
  const trimmed = value.trim();
  if (/^\d+(\.\d+)?$/.test(trimmed)) return positive(Number(trimmed), trimmed) * 1e6;
  return Math.round(parseQuantity(trimmed));
}

function positive(value: number, text: string): number {
  if (!Number.isFinite(value) || value <= 0) throw new Error(`"${text}" must be a positive quantity`);
  return value;
}

/** Bytes in binary units for messages: "512 MiB", "21.6 GiB". */
export function formatBytes(bytes: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${Number.isInteger(value) ? value : value.toFixed(1)} ${units[unit]}`;
}

/** A quantity field of a configuration file: text or a number that `parse` accepts, its message when not. */
export const quantitySchema = (parse: (value: string | number) => number) =>
  z.union([z.string(), z.number()]).superRefine((value, ctx) => {
    try {
      parse(value);
    } catch (err) {
      ctx.addIssue({ code: 'custom', message: (err as Error).message });
    }
  });
