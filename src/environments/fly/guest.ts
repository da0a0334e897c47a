/**
 * Fly's guest sizes, as its own clients validate them before the Machines API would refuse them:
 * - CPUs: shared 1, 2, 4, 6 or 8; performance 1 or an even count up to 16 (flyctl internal/machine/update.go
 *   `cpusPerKind`; flyctl's guest flags: "invalid number of CPUs"; fly-go's presets stop at shared-cpu-8x).
 * - Memory per CPU: shared 256 to 2048 MB, performance 2048 to 8192 MB (fly-go machine_types.go
 *   MIN_MEMORY_MB_PER_SHARED_CPU, MAX_MEMORY_MB_PER_SHARED_CPU, MIN_MEMORY_MB_PER_CPU, MAX_MEMORY_MB_PER_CPU).
 * - Memory in steps of 256 MB (shared) or 1024 MB (performance) (flyctl's guest flags, `memoryIncrement`).
 */
import { smallestGuest } from '../kit/guest-size';
import type { GuestSize, GuestSizeRefusal } from '../../contracts/provider';

const RULES = {
  shared: {
    cpuSteps: [1, 2, 4, 6, 8],
    memoryStepMb: 256,
    minMemoryMb: (cpus: number) => cpus * 256,
    maxMemoryMb: (cpus: number) => cpus * 2048,
    what: "Fly's shared-CPU guests",
  },
  performance: {
    cpuSteps: [1, 2, 4, 6, 8, 10, 12, 14, 16],
    memoryStepMb: 1024,
    minMemoryMb: (cpus: number) => cpus * 2048,
    maxMemoryMb: (cpus: number) => cpus * 8192,
    what: "Fly's performance-CPU guests",
  },
} as const;

/** The smallest Fly guest of `cpuKind` at least `wanted`, or why there is none. */
export function flyGuestSize(wanted: GuestSize, cpuKind: 'shared' | 'performance'): GuestSize | GuestSizeRefusal {
  return smallestGuest(wanted, RULES[cpuKind]);
}
