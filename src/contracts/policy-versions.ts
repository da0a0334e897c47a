/** Where the gateway reads a job's current policy version from (`rollout ctl <job> policy-version N` changes it). */
export interface PolicyVersions {
  /** The job's version now; `initial` (its job.yaml value) when none was set since. */
  current(jobWorkflowId: string, initial: number | null): Promise<number | null>;
}
