import type { EnvironmentType } from '../src/contracts/job-config';
import type { ActivityDeps } from './context';
import { heartbeating } from './context';

export interface RemoveImageInput {
  environmentType: EnvironmentType;
  image: string;
}

/** Removes an image the job built once no trial of the job needs it (`environment.delete: true`). */
export function removeImage(deps: ActivityDeps) {
  return async function removeImage({ environmentType, image }: RemoveImageInput): Promise<boolean> {
    return heartbeating(() => deps.environment(environmentType).removeImage(image));
  };
}
