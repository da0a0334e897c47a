/**
 * Install once per (image, agent, version) per host, also when several trials start at once: the first trial to
 * find no snapshot installs, and the others on this worker wait (within their start step) for its snapshot instead of
 * installing alongside it. If that install fails or takes too long, a waiter goes ahead and installs itself.
 */
interface PendingInstall {
  trialId: string;
  done: Promise<void>;
  finish: () => void;
}

export class InstallGate {
  private readonly byKey = new Map<string, PendingInstall>();

  /**
   * The snapshot image for `key`, waiting for an install of it under way on this worker; null when this trial must
   * install (it then holds the gate until `release`).
   */
  async snapshotFor(
    key: string,
    trialId: string,
    find: () => Promise<string | null>,
    signal: AbortSignal,
    maxWaitMs: number
  ): Promise<string | null> {
    const deadline = Date.now() + maxWaitMs;
    for (;;) {
      const found = await find();
      if (found) return found;
      const pending = this.byKey.get(key);
      if (!pending || pending.trialId === trialId) {
        if (!pending) this.hold(key, trialId);
        return null;
      }
      const remaining = deadline - Date.now();
      if (remaining <= 0) return null;
      await waitFor(pending.done, remaining, signal);
      if (Date.now() >= deadline && this.byKey.get(key) === pending) return null;
    }
  }

  /** The trial installed (or gave up): waiters look for its snapshot, and the next one may install. */
  release(trialId: string): void {
    for (const [key, pending] of this.byKey) {
      if (pending.trialId !== trialId) continue;
      this.byKey.delete(key);
      pending.finish();
    }
  }

  private hold(key: string, trialId: string): void {
    let finish!: () => void;
    const done = new Promise<void>((resolve) => (finish = resolve));
    this.byKey.set(key, { trialId, done, finish });
  }
}

function waitFor(done: Promise<void>, ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(finish, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason as Error);
    };
    function finish() {
      clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
      resolve();
    }
    if (signal.aborted) return onAbort();
    signal.addEventListener('abort', onAbort, { once: true });
    void done.then(finish);
  });
}

/** One per worker process: the trials of all its workers share the host's Docker engine. */
export const installGate = new InstallGate();
