/**
 * Modal's published rules the stand-in applies to a sandbox's definition and tags, each from Modal's own sources.
 * Modal's server is closed: the wording of its refusals is the stand-in's (docs/modal.md, "to confirm on a real
 * account"); the status, INVALID_ARGUMENT, is what the SDK maps to InvalidError for these RPCs.
 */
import type { Message } from './proto';
import { grpcError } from './proto';

const INVALID_ARGUMENT = 3;

/**
 * The GPU types of Modal's GPU guide (modal.com/docs/guide/gpu, "Specifying GPU type"), upper-cased as the SDK sends
 * them (`parseGpuConfig`); "B200, H200, H100, A100, L4, T4 and L40S instances support up to 8 GPUs … A10 instances
 * support up to 4 GPUs" (same page, "Specifying GPU count").
 */
const GPU_TYPES = new Set([
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
]);
for (const type of ['H200', 'B200', 'B200+']) GPU_TYPES.add(type);
const MOST_GPUS: Record<string, number> = { A10: 4 };

/**
 * A sandbox's GPUs: none on the V2 path (the SDK itself refuses them: "GPUs are not supported by experimentalCreate"),
 * on V1 a type of Modal's list and no more than it attaches to one container. The stand-in's containers get no GPU
 * device (this machine has none): it checks the request, as Modal's API does before scheduling.
 */
export function checkGpu(definition: Message, version: 'V1' | 'V2'): void {
  const gpu = (definition.resources as Message | undefined)?.gpuConfig as Message | undefined;
  const count = Number(gpu?.count ?? 0);
  if (count === 0) return;
  if (version === 'V2') throw grpcError(INVALID_ARGUMENT, 'GPUs are not supported by SandboxCreateV2');
  const type = (gpu?.gpuType as string | undefined) ?? '';
  if (!GPU_TYPES.has(type)) {
    throw grpcError(INVALID_ARGUMENT, `Unknown GPU type: '${type}' (one of ${[...GPU_TYPES].join(', ')})`);
  }
  const most = MOST_GPUS[type] ?? 8;
  if (count > most) throw grpcError(INVALID_ARGUMENT, `${type} supports at most ${most} GPUs per container`);
}

/**
 * Modal's tag rule: "Tags may only contain alphanumeric characters, dashes, periods, or underscores, and must be 63
 * characters or less" (modal-labs/modal-client py/modal/_utils/name_utils.py, the tag check), for names and values.
 */
export function checkTags(tags: Message[]): void {
  for (const tag of tags) {
    for (const text of [tag.tagName, tag.tagValue] as string[]) {
      if (!/^[A-Za-z0-9._-]{1,63}$/.test(text)) {
        throw grpcError(
          INVALID_ARGUMENT,
          `Invalid tag '${text}': tags may only contain alphanumeric characters, dashes, periods, or underscores, and must be 63 characters or less`
        );
      }
    }
  }
}
