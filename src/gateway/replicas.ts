/**
 * job.yaml `agents[].replicas`: inference servers of one model. Each trial is pinned to one (its calls share the
 * server's prefix cache), trials are spread evenly over the replicas this gateway knows alive, and a replica that
 * stops answering is set aside for a while: its trials move to another one (the trial's log says so).
 */

/** How long a replica that did not answer is left out of assignments. */
const DEAD_FOR_MS = 30_000;

export class ReplicaPool {
  private readonly load = new Map<string, number>();
  private readonly deadUntil = new Map<string, number>();

  constructor(readonly replicas: readonly string[]) {
    for (const replica of replicas) this.load.set(replica, 0);
  }

  /** The least loaded live replica (the first in job.yaml order on a tie); every one when all seem dead. */
  assign(except: string | null = null): string | null {
    const now = Date.now();
    const live = this.replicas.filter((r) => r !== except && (this.deadUntil.get(r) ?? 0) <= now);
    const candidates = live.length > 0 ? live : this.replicas.filter((r) => r !== except);
    let best: string | null = null;
    for (const replica of candidates)
      if (best === null || this.load.get(replica)! < this.load.get(best)!) best = replica;
    if (best !== null) this.load.set(best, this.load.get(best)! + 1);
    return best;
  }

  release(replica: string): void {
    this.load.set(replica, Math.max(0, (this.load.get(replica) ?? 0) - 1));
  }

  markDead(replica: string): void {
    this.deadUntil.set(replica, Date.now() + DEAD_FOR_MS);
  }
}

/** One pool per set of replicas on this gateway, shared by every trial of every job that names the same set. */
export class ReplicaPools {
  private readonly pools = new Map<string, ReplicaPool>();

  of(replicas: readonly string[]): ReplicaPool {
    const key = JSON.stringify(replicas);
    let pool = this.pools.get(key);
    if (!pool) this.pools.set(key, (pool = new ReplicaPool(replicas)));
    return pool;
  }
}

/** One trial's replica: assigned when the trial opens, moved when it stops answering, released when it closes. */
export class StickyReplica {
  private current: string | null;

  constructor(
    private readonly pool: ReplicaPool,
    private readonly note: (line: string) => void
  ) {
    this.current = pool.assign();
  }

  get replica(): string | null {
    return this.current;
  }

  release(): void {
    if (this.current) this.pool.release(this.current);
    this.current = null;
  }

  /**
   * Sends a call to the trial's replica; one that cannot be reached (no answer at all, the agent still waiting) is set
   * aside and the call goes to the next live one, at most once per replica. `lastTry`: the call's last chance, whose
   * failure the agent gets as a 502.
   */
  async forward<T extends { status: number; attempts: unknown[]; failure: { message: string } | null }>(
    res: { headersSent: boolean; destroyed: boolean },
    send: (baseUrl: string, lastTry: boolean) => Promise<T>
  ): Promise<T & { replica: string }> {
    const attempts: unknown[] = [];
    for (let tries = 1; ; tries++) {
      const replica = this.current ?? this.pool.replicas[0]!;
      const lastTry = tries >= this.pool.replicas.length;
      const sent = await send(replica.replace(/\/+$/, ''), lastTry);
      attempts.push(...sent.attempts);
      if (lastTry || sent.status !== 0 || res.headersSent || res.destroyed) return { ...sent, attempts, replica };
      const why = sent.failure?.message ?? 'no answer';
      this.pool.markDead(replica);
      this.pool.release(replica);
      this.current = this.pool.assign(replica);
      this.note(
        `replica ${replica} did not answer (${why}): this trial's model calls go to ${this.current} from now on`
      );
    }
  }
}
