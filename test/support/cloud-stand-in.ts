/**
 * What every stand-in of a cloud sandbox vendor's API offers the tests and `npm run stand-in` (test/support/
 * stand-in.ts). A stand-in speaks the wire protocol the vendor's unmodified SDK speaks, at an address the SDK's own
 * configuration points at, and runs its sandboxes as local Docker containers. Not the vendor: the real services are
 * tested by `npm run test:cloud` when credentials are set.
 */
export type CloudVendor = 'modal' | 'daytona' | 'e2b' | 'fly';

export interface CloudStandIn {
  readonly vendor: CloudVendor;
  /**
   * The variables that point the SDK (and Rollout's credentials check) at the stand-in, e.g. an API URL and a test
   * key: what `npm run stand-in` prints as `export NAME=value` lines, and what the tests give the worker.
   */
  readonly env: Record<string, string>;
  /** The next `count` sandbox creations are answered with the vendor's own quota (or rate-limit) reply. */
  failNextCreates(count: number): void;
  /**
   * Every API call kind (create, exec, file, list, delete, snapshot) answered with the vendor's own rate-limit reply
   * at this rate (0 to 1); 0 ends it. `npm run stand-in -- <vendor> --faults rate=0.2`.
   */
  setFaults(faults: { rate: number }): void;
  /**
   * What happens to a vendor's built images between two jobs: Daytona deactivates snapshots unused for 14 days
   * ('inactive'), another job's release deletes them ('deleted'). Absent: the vendor has no such state.
   */
  retireImages?(how: 'inactive' | 'deleted'): Promise<void>;
  /** From now on, image builds meet a quota that waiting does not clear (Daytona's snapshot quota); false ends it. */
  lastingQuota?(on: boolean): void;
  /**
   * API calls it has answered so far, of every kind (HTTP requests; gRPC calls on Modal's): the benchmark's calls per
   * trial, Rollout's against the floor's.
   */
  requests(): number;
  /** The ids of the sandboxes it holds now (each a Docker container of its own). */
  sandboxes(): Promise<string[]>;
  /** Removes every sandbox (container) and image it made, and stops listening. */
  stop(): Promise<void>;
}
