import { z } from 'zod';

/**
 * Modal's GPU types, as its GPU guide lists them (modal.com/docs/guide/gpu, "Specifying GPU type"; the SDK sends the
 * type upper-cased, `parseGpuConfig` in the `modal` JS SDK): there is no `any`. Up to 8 GPUs per container, 4 of A10.
 */
export const MODAL_GPU_TYPES = [
  'T4',
  'L4',
  'A10',
  'L40S',
  'A100',
  'A100-40GB',
  'A100-80GB',
  'RTX-PRO-6000',
  'H100',
  'H100!',
  'H200',
  'B200',
  'B200+',
] as const;
export const MODAL_MAX_GPUS: Record<string, number> = { A10: 4 };
export const MODAL_DEFAULT_MAX_GPUS = 8;

/** A GPU type as Modal names it (any case), or null when Modal has no such type. */
export function modalGpuType(type: string): string | null {
  const upper = type.toUpperCase();
  return (MODAL_GPU_TYPES as readonly string[]).includes(upper) ? upper : null;
}

/**
 * environment keys of `type: modal` (credentials are not among them: they come from the worker's environment, see
 * credentials.ts). Names as Modal's SDK takes them.
 */
export const ModalSettingsSchema = z.strictObject({
  /** The Modal App sandboxes run under (made on first use). */
  app: z
    .string()
    .regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/, 'letters, digits, ".", "_" and "-" (a Modal App name)')
    .default('rollout'),
  /** A Modal Environment of the workspace; else the profile's (MODAL_ENVIRONMENT) or the workspace's default. */
  environment: z.string().min(1).optional(),
  /** Where sandboxes may run, e.g. "us-east" or ["us-east", "us-west"]. */
  region: z.union([z.string().min(1), z.array(z.string().min(1)).min(1)]).optional(),
  /** The GPU type for tasks that ask for GPUs (task.toml [environment] gpus gives the count), e.g. "L4", "H100". */
  gpu: z
    .string()
    .refine((type) => modalGpuType(type) !== null, `one of Modal's GPU types: ${MODAL_GPU_TYPES.join(', ')}`)
    .optional(),
});
export type ModalSettings = z.infer<typeof ModalSettingsSchema>;
