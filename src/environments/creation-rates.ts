/**
 * How many sandboxes a provider's vendor lets one account create a second: job.yaml `environment.creates_per_second`,
 * else the vendor's documented limit below. Every worker of a deployment draws from one shared window per provider
 * and limit (src/limits/creation-rate.ts), so the vendor sees at most this rate however many workers there are.
 * Providers without a limit (Docker, local processes, Kubernetes: the cluster's own API priority and fairness) are
 * not listed: their creations are not paced.
 */
export const DEFAULT_CREATES_PER_SECOND: Readonly<Record<string, number>> = {
  // https://e2b.dev/docs/sandbox/rate-limits: "Sandbox creation rate" 5 / sec on Pro (1 / sec on Hobby).
  e2b: 5,
  // https://www.daytona.io/docs/en/rate-limits: "Sandbox Creation" 600 requests per 60 seconds.
  daytona: 10,
  // Modal caps sandbox creation at 5 per second (modal.com/docs/guide/sandboxes, as cited in issue 31).
  modal: 5,
  // https://fly.io/docs/machines/api/working-with-machines-api/ (rate limits): 1 request per second per action
  // (create) per app, with short bursts of 3.
  fly: 1,
};

/** A trial spec's pace of creations on `type`: the job's own setting, else the vendor's default; none: not paced. */
export function creationPace(type: string, configured: number | undefined): { createsPerSecond?: number } {
  const pace =
    configured ?? (Object.hasOwn(DEFAULT_CREATES_PER_SECOND, type) ? DEFAULT_CREATES_PER_SECOND[type] : undefined);
  return pace === undefined ? {} : { createsPerSecond: pace };
}
