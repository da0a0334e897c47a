/**
 * Images as E2B templates, built by E2B from the task's environment/Dockerfile (the SDK's Template().fromDockerfile,
 * its COPY sources uploaded from the folder) or from docker_image as is (fromImage). A template is named after the
 * environment's content key, so one environment builds once per E2B team and every later job reuses it. Each job
 * holds a reference to it, a tag `job-<hash of the job name>` on its build; `delete: true` removes the job's tag, and
 * the template goes with the last one.
 */
import path from 'node:path';

import type { BuildRequest } from '../../contracts/environment';
import { TaskEnvironmentError } from '../../contracts/environment';
import { quotaMaxWaitMs } from '../kit/quota';
import type { QuotaWaitMs } from './client';
import { e2bQuotaMessage, ifFound, sdk, withE2BQuota } from './client';
import { JOB_TAG_PREFIX, PREBUILT_TAG, isSnapshotOf, parseReference, templateName } from './names';
import type { E2BSettings } from './settings';

/**
 * The template of `request`, tagged `tag` (a job's reference, or PREBUILT_TAG): found by its name unless forced, else
 * built. `fresh`: built now.
 */
export async function buildTemplate(
  request: BuildRequest,
  settings: E2BSettings,
  quotaWaitMs: QuotaWaitMs,
  tag: string
): Promise<{ image: string; fresh: boolean }> {
  const { Template } = sdk();
  const name = templateName(request.envKey, settings);
  const options = { signal: request.signal ?? AbortSignal.timeout(request.timeoutMs) };
  if (!request.force && (await withE2BQuota('template lookup', quotaWaitMs, () => Template.exists(name, options)))) {
    await withE2BQuota('template tag', quotaWaitMs, () => Template.assignTags(name, [tag], options));
    request.onOutput?.(`e2b: template ${name} exists: reused`);
    return { image: `${name}:${tag}`, fresh: false };
  }
  let template;
  try {
    template = request.dockerImage
      ? Template().fromImage(request.dockerImage)
      : Template({ fileContextPath: request.contextDir }).fromDockerfile(path.join(request.contextDir, 'Dockerfile'));
  } catch (err) {
    // What E2B cannot build from this Dockerfile (a multi-stage build) is the task's own problem.
    throw new TaskEnvironmentError('EnvironmentBuildError', `e2b template of ${request.contextDir}: ${message(err)}`);
  }
  try {
    // A team's concurrent builds are limited (429 "you have reached the maximum number of concurrent template
    // builds": e2b-dev/infra template/register_build.go:75-98): another build ends within its own limit, so this
    // one waits that long, not only the quota wait.
    const buildWaitMs = Math.max(quotaWaitMs ?? quotaMaxWaitMs(), request.timeoutMs);
    await withE2BQuota('template build', buildWaitMs, () =>
      Template.build(template, name, {
        ...options,
        tags: ['default', tag],
        cpuCount: settings.cpu_count,
        memoryMB: settings.memory_mb,
        skipCache: request.force,
        onBuildLogs: (entry) => request.onOutput?.(`e2b: ${entry.message}`),
      })
    );
  } catch (err) {
    if (isTaskBuildFailure(err)) {
      // The failed build holds the name: without this job's reference the template goes, and a later job rebuilds.
      await releaseTemplate(`${name}:${tag}`, quotaWaitMs);
      throw new TaskEnvironmentError('EnvironmentBuildError', `e2b template build ${name} failed: ${message(err)}`);
    }
    throw err;
  }
  return { image: `${name}:${tag}`, fresh: true };
}

/**
 * A build that E2B ran and that failed (a RUN step's error): the SDK's BuildError from the build's status. Its API
 * errors (an HTTP status first), uploads and quota replies are the infrastructure's.
 */
function isTaskBuildFailure(err: unknown): boolean {
  const { BuildError, FileUploadError } = sdk();
  return (
    err instanceof BuildError &&
    !(err instanceof FileUploadError) &&
    e2bQuotaMessage(err) === null &&
    !/^\d{3}: /.test(err.message)
  );
}

/** Releases the job's tag; with no job's tag left (and not prebuilt), deletes the template. */
export async function releaseTemplate(image: string, quotaWaitMs: QuotaWaitMs): Promise<boolean> {
  const { Template, Sandbox } = sdk();
  const { name, tag } = parseReference(image);
  if (!tag.startsWith(JOB_TAG_PREFIX)) return true;
  if (!(await withE2BQuota('template lookup', quotaWaitMs, () => Template.exists(name)))) return true;
  // Released already (an earlier attempt): idempotent.
  await ifFound(withE2BQuota('template untag', quotaWaitMs, () => Template.removeTags(name, [tag])));
  const tags = await withE2BQuota('template tags', quotaWaitMs, () => Template.getTags(name));
  if (tags.some((t) => t.tag.startsWith(JOB_TAG_PREFIX) || t.tag === PREBUILT_TAG)) return true;
  // Its install snapshots first (they are templates of their own). E2B's SDK deletes a template through
  // deleteSnapshot (snapshots are templates: DELETE /templates/{id}).
  for (const snapshot of await snapshotsOf(name, quotaWaitMs)) {
    await withE2BQuota('snapshot delete', quotaWaitMs, () => Sandbox.deleteSnapshot(snapshot));
  }
  await withE2BQuota('template delete', quotaWaitMs, () => Sandbox.deleteSnapshot(name));
  return true;
}

/** The ids of a template's install snapshots, through every page of the team's snapshots. */
async function snapshotsOf(template: string, quotaWaitMs: QuotaWaitMs): Promise<string[]> {
  const paginator = sdk().Sandbox.listSnapshots();
  const found: string[] = [];
  while (paginator.hasNext) {
    const page = await withE2BQuota('snapshot list', quotaWaitMs, () => paginator.nextItems());
    for (const snapshot of page) {
      if (snapshot.names.some((name) => isSnapshotOf(name, template))) found.push(snapshot.snapshotId);
    }
  }
  return found;
}

function message(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
