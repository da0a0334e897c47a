/**
 * Clean-up by label, for the providers whose vendor lists sandboxes by their labels (tags, metadata, pod labels):
 * what an earlier attempt of a trial left (removeTrial, before a start and after a crash), and every sandbox of the
 * deployment for the janitor (heldEnvironments). The provider says how its vendor lists and removes; the labels are
 * Rollout's own (cloud-sandbox.ts), spelled as the vendor takes them by the provider.
 */
import type { EnvironmentOwner, HeldEnvironment } from '../../contracts/environment';
import { LABEL_DEPLOYMENT, LABEL_ROLE, LABEL_TRIAL } from '../../contracts/environment';
import { heldSandbox } from './cloud-sandbox';

export interface ListedSandbox {
  id: string;
  /** Its labels under Rollout's names (null: the vendor gave none). */
  labels: Record<string, string> | null;
}

export interface SandboxListing {
  /** The sandboxes carrying every one of `labels` (Rollout's names and values), in every page of the vendor's list. */
  list(labels: Record<string, string>): Promise<ListedSandbox[]>;
  /** Removes one; a sandbox gone already is not an error. */
  remove(id: string): Promise<void>;
}

/** Removes this deployment's sandboxes of the trial (of `role` only, when given); gives how many there were. */
export async function removeTrialSandboxes(
  listing: SandboxListing,
  owner: EnvironmentOwner,
  trialId: string,
  role?: string
): Promise<number> {
  const listed = await listing.list({
    [LABEL_DEPLOYMENT]: owner.deployment,
    [LABEL_TRIAL]: trialId,
    ...(role ? { [LABEL_ROLE]: role } : {}),
  });
  for (const { id } of listed) await listing.remove(id);
  return listed.length;
}

/** Every sandbox of this deployment that is a trial's, whichever worker made it (see heldSandbox). */
export async function heldSandboxes(
  listing: Pick<SandboxListing, 'list'>,
  owner: EnvironmentOwner
): Promise<HeldEnvironment[]> {
  const listed = await listing.list({ [LABEL_DEPLOYMENT]: owner.deployment });
  return listed.flatMap(({ id, labels }) => heldSandbox(owner, id, labels) ?? []);
}
