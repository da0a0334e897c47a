/**
 * The kubernetes provider's check of its configuration before a job starts: a kubeconfig it can read (KUBECONFIG,
 * else ~/.kube/config, else the in-cluster service account) naming the context job.yaml asks for. Each failure is one
 * line naming the provider and the setting, where the client would only have said `ENOENT: ... open '/path'`.
 */
import { readFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import path from 'node:path';

import { isAbsent } from '../../files/absent';
import { ProviderConfigError } from '../../contracts/provider';
import { client } from './client';
import type { KubernetesSettings } from './settings';

const SERVICE_ACCOUNT_TOKEN = '/var/run/secrets/kubernetes.io/serviceaccount/token';

export async function checkKubeconfig(settings: KubernetesSettings): Promise<void> {
  const fromVariable = process.env.KUBECONFIG;
  const files = fromVariable
    ? fromVariable.split(path.delimiter).filter(Boolean)
    : [path.join(homedir(), '.kube', 'config')];
  const source = fromVariable ? 'KUBECONFIG' : 'the default kubeconfig';
  const texts: string[] = [];
  for (const file of files) {
    try {
      texts.push(await readFile(file, 'utf8'));
    } catch (err) {
      // No kubeconfig at the default place is fine inside a cluster (its service account).
      if (!fromVariable && isAbsent(err) && process.env.KUBERNETES_SERVICE_HOST) return inCluster();
      if (!fromVariable && isAbsent(err)) {
        throw new ProviderConfigError(
          'kubernetes',
          'input',
          `no cluster configured: no ${file}, KUBECONFIG is not set, and this is not inside a cluster`
        );
      }
      throw new ProviderConfigError(
        'kubernetes',
        'input',
        `cannot read the kubeconfig ${file} (${source}): ${reason(err)}`
      );
    }
  }
  const config = new (client().KubeConfig)();
  try {
    config.loadFromDefault();
  } catch (err) {
    throw new ProviderConfigError(
      'kubernetes',
      'input',
      `cannot parse the kubeconfig ${files.join(path.delimiter)} (${source}): ${reason(err)}`
    );
  }
  if (settings.context && !config.getContextObject(settings.context)) {
    throw new ProviderConfigError(
      'kubernetes',
      'input',
      `environment.context "${settings.context}" is not a context of the kubeconfig ${files.join(path.delimiter)} (${source})`
    );
  }
  if (!settings.context && !config.getCurrentCluster()) {
    throw new ProviderConfigError(
      'kubernetes',
      'input',
      `the kubeconfig ${files.join(path.delimiter)} (${source}) has no current context: set one, or environment.context`
    );
  }
}

async function inCluster(): Promise<void> {
  try {
    await readFile(SERVICE_ACCOUNT_TOKEN);
  } catch (err) {
    throw new ProviderConfigError(
      'kubernetes',
      'input',
      `inside a cluster (KUBERNETES_SERVICE_HOST), but cannot read its service account token ${SERVICE_ACCOUNT_TOKEN}: ${reason(err)}`
    );
  }
}

/** A file system error as words: "no such file", "permission denied", else its message. */
function reason(err: unknown): string {
  const code = (err as NodeJS.ErrnoException).code;
  if (code === 'ENOENT') return 'no such file';
  if (code === 'EACCES') return 'permission denied';
  if (code === 'EISDIR') return 'a folder, not a file';
  return (err instanceof Error ? err.message : String(err)).split('\n')[0] ?? '';
}
