/**
 * Containers that trust what the host trusts. Where outbound TLS passes an intercepting proxy, the proxy's CA is in
 * the host's trust store but not in any image, so npm and pip fail inside containers. The worker then gives each
 * container the host's bundle (the system bundle plus the extra certificates: a bare image may have no
 * ca-certificates at all, and PIP_CERT replaces pip's own bundle) and points the usual variables at it.
 */
import { createHash } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';

import { writeFileAtomic } from '../files/atomic';
import { hostCacheDir } from '../host-cache';
import type { StartFile } from '../contracts/environment';
import { ifPresent } from '../files/absent';

export const CA_TRUST_MODES = ['auto', 'on', 'off'] as const;
export type CaTrustMode = (typeof CA_TRUST_MODES)[number];

/** Where the bundle lands in containers (its file name is kept by the upload). */
export const CONTAINER_CA_DIR = '/usr/local/share/rollout';
export const CONTAINER_CA_BUNDLE = `${CONTAINER_CA_DIR}/ca-certificates.crt`;

export const CA_TRUST_ENV: Readonly<Record<string, string>> = {
  SSL_CERT_FILE: CONTAINER_CA_BUNDLE,
  NODE_EXTRA_CA_CERTS: CONTAINER_CA_BUNDLE,
  PIP_CERT: CONTAINER_CA_BUNDLE,
  REQUESTS_CA_BUNDLE: CONTAINER_CA_BUNDLE,
  CURL_CA_BUNDLE: CONTAINER_CA_BUNDLE,
  GIT_SSL_CAINFO: CONTAINER_CA_BUNDLE,
};

const SYSTEM_BUNDLE = '/etc/ssl/certs/ca-certificates.crt';
const EXTRA_CA_DIR = '/usr/local/share/ca-certificates';

/**
 * The host file to give containers, or null. `auto` is on when the host has extra CAs installed (files under
 * /usr/local/share/ca-certificates); `on` without any CA file to give is an error.
 */
export async function hostCaBundle(
  mode: CaTrustMode,
  locations = { systemBundle: SYSTEM_BUNDLE, extraDir: EXTRA_CA_DIR }
): Promise<string | null> {
  if (mode === 'off') return null;
  const extras = await certificateFiles(locations.extraDir);
  if (mode === 'auto' && extras.length === 0) return null;
  const system = (await ifPresent(readFile(locations.systemBundle, 'utf8'))) ?? '';
  const parts = [system];
  for (const file of extras) {
    const pem = await readFile(file, 'utf8');
    if (!system.includes(pem.trim())) parts.push(pem); // update-ca-certificates may not have run since it was added
  }
  const bundle =
    parts
      .map((part) => part.trim())
      .filter(Boolean)
      .join('\n') + '\n';
  if (!bundle.includes('BEGIN CERTIFICATE')) {
    throw new Error(
      `container CA trust is on, but neither ${locations.systemBundle} nor ${locations.extraDir} has a certificate`
    );
  }
  const digest = createHash('sha256').update(bundle).digest('hex').slice(0, 16);
  const file = path.join(hostCacheDir(), 'ca', digest, path.basename(CONTAINER_CA_BUNDLE));
  await writeFileAtomic(file, bundle);
  return file;
}

async function certificateFiles(dir: string): Promise<string[]> {
  const entries = (await ifPresent(readdir(dir, { recursive: true, withFileTypes: true }))) ?? [];
  return entries
    .filter((entry) => entry.isFile() && /\.(crt|pem)$/.test(entry.name))
    .map((entry) => path.join(entry.parentPath, entry.name))
    .sort();
}

/**
 * What start puts in a container for the host's bundle: the bundle at CONTAINER_CA_BUNDLE, and a setup command that
 * makes it the system bundle too when the image has none.
 */
export function caBundleStart(bundle: string): { files: StartFile[]; setup: string } {
  const system = '/etc/ssl/certs/ca-certificates.crt';
  return {
    files: [{ containerPath: CONTAINER_CA_BUNDLE, hostPath: bundle }],
    setup: `{ [ -e ${system} ] || { mkdir -p /etc/ssl/certs && cp ${CONTAINER_CA_BUNDLE} ${system}; }; }`,
  };
}
