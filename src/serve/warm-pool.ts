/**
 * Sessions started ahead of demand, per task: each parked entry is a running Session workflow whose container is up,
 * waiting to be claimed. Bounded (at most `size` parked or starting per task), liveness-checked at hand-out (the
 * claim asks the container's backend whether it runs; a dead one is dropped and the next tried), replaced as they
 * are taken or die, and ended at shutdown. Being workflows, parked sessions are never mistaken for abandoned
 * containers.
 */
import { bestEffort } from '../log';
import type { SessionClaim } from '../contracts/session';

export interface WarmPoolOps {
  /** Starts a parked session of `task`; its id. */
  start(task: string): Promise<string>;
  /** Claims a parked session for a client; false when it is gone or its container is dead. */
  claim(sessionId: string, claim: SessionClaim): Promise<boolean>;
  end(sessionId: string): Promise<void>;
}

export class WarmPool {
  private readonly parked = new Map<string, string[]>();
  private readonly starting = new Map<string, number>();
  private readonly inflight = new Set<Promise<void>>();
  private closed = false;

  constructor(
    private readonly sizes: Record<string, number>,
    private readonly ops: WarmPoolOps,
    private readonly onError: (message: string) => void
  ) {}

  /** Tops every task up to its size, in the background. */
  fill(): void {
    for (const [task, size] of Object.entries(this.sizes)) {
      const have = (this.parked.get(task)?.length ?? 0) + (this.starting.get(task) ?? 0);
      for (let i = have; i < size && !this.closed; i++) {
        const started = this.startOne(task).finally(() => this.inflight.delete(started));
        this.inflight.add(started);
      }
    }
  }

  /** A claimed warm session of `task`, or undefined when none is parked (the caller starts one cold). */
  async take(task: string, claim: SessionClaim = {}): Promise<string | undefined> {
    const parked = this.parked.get(task) ?? [];
    try {
      for (let id = parked.shift(); id !== undefined; id = parked.shift()) {
        if (await this.ops.claim(id, claim)) return id;
      }
      return undefined;
    } finally {
      // Replacements start after the claim: their container starts would slow the hand-out on a busy host.
      this.fill();
    }
  }

  size(task: string): number {
    return this.parked.get(task)?.length ?? 0;
  }

  /** Ends every parked session (their containers are removed). */
  async close(): Promise<void> {
    this.closed = true;
    // Sessions still starting end themselves as soon as they are started (see startOne).
    await Promise.all(this.inflight);
    const ids = [...this.parked.values()].flat();
    this.parked.clear();
    await Promise.all(ids.map((id) => bestEffort(`ending parked session ${id}`, this.ops.end(id))));
  }

  private async startOne(task: string): Promise<void> {
    this.starting.set(task, (this.starting.get(task) ?? 0) + 1);
    try {
      const id = await this.ops.start(task);
      if (this.closed) await this.ops.end(id);
      else this.parked.set(task, [...(this.parked.get(task) ?? []), id]);
    } catch (err) {
      this.onError(`warm pool: could not start a session of ${task}: ${(err as Error).message}`);
    } finally {
      this.starting.set(task, (this.starting.get(task) ?? 1) - 1);
    }
  }
}
