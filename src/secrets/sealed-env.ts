/**
 * Per-request secrets (a remote rollout's API key) travel inside workflow inputs only sealed: AES-256-GCM with a key
 * Temporal never sees. Temporal history, the UI and result files hold ciphertext; the worker that runs the agent
 * unseals it into the container's environment. The key is ROLLOUT_SECRET_KEY (base64 of 32 bytes; set the same on
 * every machine running workers), else `<state dir>/secret.key`, made on first use with mode 0600.
 */
import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';

import { devServerConfig } from '../temporal/dev-server';

const VERSION = 'v1';
const KEY_BYTES = 32;
let cachedKey: Buffer | undefined;

function secretKey(): Buffer {
  if (cachedKey) return cachedKey;
  const fromEnv = process.env.ROLLOUT_SECRET_KEY;
  if (fromEnv) {
    const key = Buffer.from(fromEnv, 'base64');
    if (key.length !== KEY_BYTES) throw new Error(`ROLLOUT_SECRET_KEY: expected base64 of ${KEY_BYTES} bytes`);
    return (cachedKey = key);
  }
  const file = path.join(devServerConfig().stateDir, 'secret.key');
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

export function sealEnv(env: Record<string, string>): string {
  const iv = randomBytes(12);
  const cipher = createCipheriv('aes-256-gcm', secretKey(), iv);
  const sealed = Buffer.concat([cipher.update(JSON.stringify(env), 'utf8'), cipher.final()]);
  return [VERSION, iv.toString('base64'), cipher.getAuthTag().toString('base64'), sealed.toString('base64')].join(':');
}

export function unsealEnv(sealed: string): Record<string, string> {
  const [version, iv, tag, data] = sealed.split(':');
  if (version !== VERSION || !iv || !tag || !data) throw new Error('sealed secrets: unknown format');
  const decipher = createDecipheriv('aes-256-gcm', secretKey(), Buffer.from(iv, 'base64'));
  decipher.setAuthTag(Buffer.from(tag, 'base64'));
  try {
    const plain = Buffer.concat([decipher.update(Buffer.from(data, 'base64')), decipher.final()]);
    return JSON.parse(plain.toString('utf8')) as Record<string, string>;
  } catch (err) {
    throw new Error('sealed secrets: this worker has another key (set the same ROLLOUT_SECRET_KEY on every worker)', {
      cause: err,
    });
  }
}
