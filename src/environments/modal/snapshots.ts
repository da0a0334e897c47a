/**
 * Install snapshots on Modal: a sandbox's filesystem snapshot (an image of its own) right after an agent's install,
 * published under a name made of the base image and the install key, so that any worker's later trials of that image
 * and agent find it and start from it. Modal keeps a snapshot for SNAPSHOT_TTL_MS and then drops it by itself:
 * `delete: true` does not remove snapshots sooner (Modal's JS SDK cannot list published names to find them).
 */
import { createHash } from 'node:crypto';

import type { InstallSnapshots } from '../../contracts/environment';
import type { ModalConnection } from './client';
import { ifFound } from './client';
import { labelsOfModalTags } from './tags';

/** How long Modal keeps an install snapshot: a week of runs reuse it, and an abandoned one costs little for long. */
export const SNAPSHOT_TTL_MS = 7 * 24 * 3600 * 1000;

/** The published name of the install snapshot of `key` over `baseImage`. */
function snapshotName(baseImage: string, key: string): string {
  return `rollout-agent-${createHash('sha256').update(`${baseImage}\n${key}`).digest('hex').slice(0, 32)}`;
}

/** `imageTag`: the tag on a sandbox naming the image it was started from. */
export function modalInstallSnapshots(connection: ModalConnection, imageTag: string): InstallSnapshots {
  return {
    async find(baseImage, key) {
      return (await ifFound(connection.client.images.fromName(snapshotName(baseImage, key))))?.imageId ?? null;
    },
    async take(handle, key) {
      const sandbox = await connection.sandbox(handle.id);
      const base = labelsOfModalTags(await sandbox.getTags())[imageTag];
      if (!base) throw new Error(`modal sandbox ${handle.id} has no ${imageTag} tag: not started by Rollout`);
      const image = await sandbox.snapshotFilesystem({ ttlMs: SNAPSHOT_TTL_MS, timeoutMs: 10 * 60_000 });
      await image.publish(snapshotName(base, key));
      return image.imageId;
    },
  };
}
