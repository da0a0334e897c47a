import { z } from 'zod';

/**
 * registry.json, the spec's format and Harbor's legacy registry: an array of datasets, each a list of tasks in git
 * repositories. Real registries pin `git_commit_id` as a full SHA, a short SHA, the literal "HEAD" or not at all.
 */
export const RegistryTaskSchema = z.looseObject({
  name: z.string().min(1),
  git_url: z.string().min(1),
  git_commit_id: z.string().min(1).nullish(),
  path: z.string().default(''),
});
export type RegistryTask = z.infer<typeof RegistryTaskSchema>;

export const RegistryDatasetSchema = z.looseObject({
  name: z.string().min(1),
  version: z.string().min(1),
  description: z.string().default(''),
  tasks: z.array(RegistryTaskSchema),
  metrics: z.array(z.unknown()).optional(),
});
export type RegistryDataset = z.infer<typeof RegistryDatasetSchema>;

export const RegistrySchema = z.array(RegistryDatasetSchema);

/** A registry task pinned to a full commit: what config.json keeps so a resume runs exactly the same files. */
export interface PinnedTask {
  name: string;
  git_url: string;
  git_commit_id: string;
  path: string;
}

/** A pinned registry task and its dataset (`name@version`): enough for any host to fetch it. */
export interface RegistryTaskSource extends PinnedTask {
  dataset: string;
}
