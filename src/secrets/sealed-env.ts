/**
 * Per-request secrets (a remote rollout's API key) travel inside workflow inputs only sealed: AES-256-GCM with a key
 * Temporal never sees. Temporal history, the UI and result files hold ciphertext; the worker that runs the agent
 * unseals it into the container's environment. The key is ROLLOUT_SECRET_KEY (base64 of 32 bytes; set the same on
 * every machine running workers), else `<state dir>/secret.key`, made on first use with mode 0600.
 *
 * A sealed value is bound to its trial (job name, trial id, job folder, agent and plain agent env as GCM associated
 * data): copied from one workflow's history into another trial's input, or with a changed model URL, it does not
 * unseal. Its first field names the key (a hash of it), so a worker
 * with another key says so rather than blaming the trial.
 */
import { createCipheriv, createDecipheriv, createHmac, randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';

import { rolloutStateDir } from '../state-dir';

/** v1 (not bound to a trial) is refused: a v1 value copied into any trial's input would unseal there. */
const VERSION = 'v2';
const KEY_BYTES = 32;
let cachedKey: Buffer | undefined;

export function secretKey(): Buffer {
  if (cachedKey) return cachedKey;
  const fromEnv = process.env.ROLLOUT_SECRET_KEY;
  if (fromEnv) {
    const key = Buffer.from(fromEnv, 'base64');
    if (key.length !== KEY_BYTES) throw new Error(`ROLLOUT_SECRET_KEY: expected base64 of ${KEY_BYTES} bytes`);
    return (cachedKey = key);
  }
  const file = path.join(rolloutStateDir(), 'secret.key');
  try {
    cachedKey = Buffer.from(readFileSync(file, 'utf8').trim(), 'base64');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    mkdirSync(path.dirname(file), { recursive: true });
    // 'wx': two processes making the key at once must not end up with different keys.
    try {
      writeFileSync(file, randomBytes(KEY_BYTES).toString('base64'), { mode: 0o600, flag: 'wx' });
    } catch (raced) {
      if ((raced as NodeJS.ErrnoException).code !== 'EEXIST') throw raced;
    }
    cachedKey = Buffer.from(readFileSync(file, 'utf8').trim(), 'base64');
  }
  return cachedKey;
}

/**
 * The trial a sealed value belongs to: its identity, and what decides where its secrets go (the job folder, whose
 * config.json defines the agent; the agent; the trial's plain agent env, which may name a model URL).
 */
export interface SealedFor {
  jobName: string;
  trialId: string;
  jobDir: string;
  agentName: string;
  agentEnv?: Record<string, string>;
}

/** A value that does not unseal for this trial on this worker: a configuration error, never the agent's. */
export class SealedSecretsError extends Error {
  override name = 'SealedSecretsError';
}

function associatedData({ jobName, trialId, jobDir, agentName, agentEnv }: SealedFor): Buffer {
  const env = Object.entries(agentEnv ?? {}).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return Buffer.from(JSON.stringify([jobName, trialId, jobDir, agentName, env]), 'utf8');
}

/** Names the key without revealing it: the same on every worker that holds it. */
export function keyId(): string {
  return createHmac('sha256', secretKey()).update('rollout sealed-env key id').digest('base64url').slice(0, 12);
}

export function sealEnv(env: Record<string, string>, owner: SealedFor): string {
  const iv = randomBytes(12);
  const cipher = createCipheriv('aes-256-gcm', secretKey(), iv);
  cipher.setAAD(associatedData(owner));
  const sealed = Buffer.concat([cipher.update(JSON.stringify(env), 'utf8'), cipher.final()]);
  return [
    VERSION,
    keyId(),
    iv.toString('base64'),
    cipher.getAuthTag().toString('base64'),
    sealed.toString('base64'),
  ].join(':');
}

export function unsealEnv(sealed: string, owner: SealedFor): Record<string, string> {
  const [version, key, iv, tag, data] = sealed.split(':');
  if (version === 'v1')
    throw new SealedSecretsError(
      'sealed secrets: sealed by an older Rollout, bound to no trial: refused (start it again)'
    );
  if (version !== VERSION || !key || !iv || !tag || !data)
    throw new SealedSecretsError('sealed secrets: unknown format');
  if (key !== keyId())
    throw new SealedSecretsError(
      'sealed secrets: sealed with another key (set the same ROLLOUT_SECRET_KEY on every worker and rollout serve)'
    );
  const decipher = createDecipheriv('aes-256-gcm', secretKey(), Buffer.from(iv, 'base64'));
  decipher.setAAD(associatedData(owner));
  decipher.setAuthTag(Buffer.from(tag, 'base64'));
  try {
    const plain = Buffer.concat([decipher.update(Buffer.from(data, 'base64')), decipher.final()]);
    return JSON.parse(plain.toString('utf8')) as Record<string, string>;
  } catch (err) {
    throw new SealedSecretsError(
      `sealed secrets: not sealed for this trial (job ${owner.jobName}, trial ${owner.trialId}): refused`,
      { cause: err }
    );
  }
}
