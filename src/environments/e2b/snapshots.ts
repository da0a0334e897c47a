/**
 * Install snapshots on E2B: after an agent's fresh install, the sandbox is snapshotted (E2B pauses it, keeps its
 * filesystem and memory as a template, and resumes it), named after its base template and the install's key, so
 * later trials of the same template and agent start from it with the agent installed. Snapshots go with their base
 * template (releaseTemplate).
 */
import type { EnvironmentHandle } from '../../contracts/trial';
import type { InstallSnapshots } from '../../contracts/environment';
import type { QuotaWaitMs } from './client';
import { sdk, withE2BQuota } from './client';
import { snapshotName } from './names';

export function e2bSnapshots(quotaWaitMs: QuotaWaitMs): InstallSnapshots {
  return {
    async find(baseImage, key) {
      const name = snapshotName(baseImage, key);
      return (await withE2BQuota('snapshot lookup', quotaWaitMs, () => sdk().Template.exists(name))) ? name : null;
    },
    async take(handle: EnvironmentHandle, key) {
      // The template the sandbox started from: a fresh install runs only in a sandbox of the base template.
      const info = await withE2BQuota('sandbox info', quotaWaitMs, () => sdk().Sandbox.getInfo(handle.id));
      const name = snapshotName(info.name ?? info.templateId, key);
      await withE2BQuota('snapshot', quotaWaitMs, () => sdk().Sandbox.createSnapshot(handle.id, { name }));
      return name;
    },
  };
}
