/**
 * Where and how Rollout connects to Temporal: Temporal's environment configuration (@temporalio/envconfig, the rules
 * the `temporal` CLI follows): the profile TEMPORAL_PROFILE names (default "default") of the TOML file
 * TEMPORAL_CONFIG_FILE names (default ~/.config/temporalio/temporal.toml), overridden by TEMPORAL_ADDRESS,
 * TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, TEMPORAL_TLS, TEMPORAL_TLS_* and TEMPORAL_GRPC_META_*. Certificates and keys
 * are read and checked here, so a bad one is one line naming the setting and where it was given, before anything
 * starts. Secrets (the API key, key data) never appear in a message.
 */
import { createPrivateKey, X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import type { ClientConfigProfile, ConfigDataSource } from '@temporalio/envconfig';
import { loadClientConfigProfile, toClientOptions } from '@temporalio/envconfig';
import type { TLSConfig } from '@temporalio/client';

/** A problem with the Temporal connection's configuration or the server's answer: exit 3 (infrastructure). */
export class TemporalConfigError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'TemporalConfigError';
  }
}

/** What a client and a worker connection both take, beside the address. */
export interface TemporalConnectionOptions {
  tls?: TLSConfig | boolean | null;
  apiKey?: string;
  metadata?: Record<string, string>;
}

export interface TemporalProfile {
  /** Unset: neither the environment nor the profile names a server (Rollout then runs its embedded dev server). */
  address?: string;
  namespace: string;
  connection: TemporalConnectionOptions;
  /** Where each setting came from, for error messages: `TEMPORAL_API_KEY`, `api_key of profile "prod" in <file>`. */
  where: (setting: ProfileSetting) => string;
}

export type ProfileSetting =
  'address' | 'namespace' | 'api_key' | 'tls.client_cert' | 'tls.client_key' | 'tls.server_ca_cert' | 'tls';

const ENV_NAMES: Record<ProfileSetting, string[]> = {
  address: ['TEMPORAL_ADDRESS'],
  namespace: ['TEMPORAL_NAMESPACE'],
  api_key: ['TEMPORAL_API_KEY'],
  'tls.client_cert': ['TEMPORAL_TLS_CLIENT_CERT_PATH', 'TEMPORAL_TLS_CLIENT_CERT_DATA'],
  'tls.client_key': ['TEMPORAL_TLS_CLIENT_KEY_PATH', 'TEMPORAL_TLS_CLIENT_KEY_DATA'],
  'tls.server_ca_cert': ['TEMPORAL_TLS_SERVER_CA_CERT_PATH', 'TEMPORAL_TLS_SERVER_CA_CERT_DATA'],
  tls: ['TEMPORAL_TLS'],
};

/** The TOML file envconfig reads (TEMPORAL_CONFIG_FILE, else the user's config folder), as it finds it. */
export function temporalConfigFile(env: NodeJS.ProcessEnv = process.env): string | undefined {
  if (env.TEMPORAL_CONFIG_FILE) return env.TEMPORAL_CONFIG_FILE;
  const platform = os.platform();
  const dir =
    platform === 'win32'
      ? env.APPDATA
      : platform === 'darwin'
        ? env.HOME && path.join(env.HOME, 'Library', 'Application Support')
        : env.XDG_CONFIG_HOME && path.isAbsolute(env.XDG_CONFIG_HOME)
          ? env.XDG_CONFIG_HOME
          : env.XDG_CONFIG_HOME
            ? undefined
            : env.HOME && path.join(env.HOME, '.config');
  return dir ? path.join(dir, 'temporalio', 'temporal.toml') : undefined;
}

/** Temporal's environment configuration, read and checked (files exist and parse); throws TemporalConfigError. */
export function loadTemporalProfile(env: NodeJS.ProcessEnv = process.env): TemporalProfile {
  const file = temporalConfigFile(env);
  const profileName = env.TEMPORAL_PROFILE ?? 'default';
  let profile: ClientConfigProfile;
  try {
    profile = loadClientConfigProfile({ overrideEnvVars: env as Record<string, string> });
  } catch (err) {
    const message = (err as Error).message.split('\n')[0]!;
    throw new TemporalConfigError(
      /not found in config data/.test(message)
        ? `Temporal profile "${profileName}" (TEMPORAL_PROFILE) is not in ${file ?? 'the Temporal config file'}`
        : `Temporal config file ${file}: ${message}`
    );
  }
  const where = (setting: ProfileSetting) => {
    const fromEnv = ENV_NAMES[setting].find((name) => env[name] !== undefined);
    return fromEnv ?? `${setting} of profile "${profileName}" in ${file}`;
  };
  checkTls(profile, where);
  let connect;
  try {
    connect = toClientOptions(profile);
  } catch (err) {
    // A file that vanished between the check and the read, or unreadable: name it.
    throw new TemporalConfigError(`Temporal TLS: ${(err as Error).message.split('\n')[0]}`);
  }
  const { tls, apiKey, metadata } = connect.connectionOptions;
  return {
    ...(profile.address ? { address: profile.address } : {}),
    namespace: profile.namespace ?? 'default',
    connection: {
      ...(tls !== undefined ? { tls } : {}),
      ...(apiKey !== undefined ? { apiKey } : {}),
      ...(metadata && Object.keys(metadata).length > 0 ? { metadata: metadata as Record<string, string> } : {}),
    },
    where,
  };
}

/** Each certificate and key given must exist and be PEM of the right kind; a client pair comes whole. */
function checkTls(profile: ClientConfigProfile, where: (setting: ProfileSetting) => string): void {
  const tls = profile.tls;
  if (!tls || tls.disabled) return;
  const check = (setting: ProfileSetting, source: ConfigDataSource | undefined, kind: 'certificate' | 'key') => {
    if (!source) return;
    const label = `Temporal TLS ${setting.replace('tls.', '').replace(/_/g, ' ')}`;
    const origin = 'path' in source ? `${source.path} (${where(setting)})` : `(${where(setting)})`;
    let data: Buffer;
    try {
      data = 'path' in source ? readFileSync(source.path) : Buffer.from(source.data);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      throw new TemporalConfigError(
        `${label} ${origin}: ${code === 'ENOENT' ? 'no such file' : (err as Error).message.split('\n')[0]}`
      );
    }
    try {
      if (kind === 'certificate') new X509Certificate(data);
      else createPrivateKey(data);
    } catch {
      throw new TemporalConfigError(
        `${label} ${origin}: not a PEM ${kind === 'certificate' ? 'certificate' : 'private key'}`
      );
    }
  };
  check('tls.client_cert', tls.clientCert, 'certificate');
  check('tls.client_key', tls.clientKey, 'key');
  check('tls.server_ca_cert', tls.serverCACert, 'certificate');
  if (Boolean(tls.clientCert) !== Boolean(tls.clientKey)) {
    const [given, missing]: ProfileSetting[] = tls.clientCert
      ? ['tls.client_cert', 'tls.client_key']
      : ['tls.client_key', 'tls.client_cert'];
    throw new TemporalConfigError(
      `Temporal TLS: ${where(given!)} is set but the client ${missing!.replace('tls.client_', '')} is not ` +
        `(${ENV_NAMES[missing!][0]} or ${missing} in the profile)`
    );
  }
}
