/**
 * Payload encryption for a Temporal the team does not own: with ROLLOUT_PAYLOAD_KEY (32 bytes, base64) every payload
 * Rollout writes (workflow and activity inputs and results, signals, queries, updates, memos) is encrypted with
 * AES-256-GCM in Temporal's payload-codec convention (its samples' `encryption`): metadata `encoding:
 * binary/encrypted` and `encryption-key-id`, data = 12-byte IV, then the ciphertext of the whole original Payload
 * (protobuf), then the 16-byte tag. Rotation: the new key in ROLLOUT_PAYLOAD_KEY, the old ones in
 * ROLLOUT_PAYLOAD_OLD_KEYS (comma-separated) until no history needs them; decode finds a payload's key by its id.
 */
import { createCipheriv, createDecipheriv, createHash, randomBytes } from 'node:crypto';

import type { DataConverter, Payload, PayloadCodec } from '@temporalio/common';
import { temporal } from '@temporalio/proto';

import { TemporalConfigError } from './envconfig';

export const ENCRYPTED_ENCODING = 'binary/encrypted';
export const KEY_ID_METADATA = 'encryption-key-id';
export const PAYLOAD_KEY_ENV = 'ROLLOUT_PAYLOAD_KEY';
export const PAYLOAD_OLD_KEYS_ENV = 'ROLLOUT_PAYLOAD_OLD_KEYS';

const IV_BYTES = 12;
const TAG_BYTES = 16;

/** A key's id: a hash of it (reveals nothing of a random 256-bit key), so any holder of the key finds it. */
export function payloadKeyId(key: Buffer): string {
  return createHash('sha256').update(key).digest('hex').slice(0, 16);
}

const text = (value: string) => new TextEncoder().encode(value);
const fromBytes = (value: Uint8Array | null | undefined) => (value ? Buffer.from(value).toString('utf8') : undefined);

export class EncryptionCodec implements PayloadCodec {
  private readonly keys: Map<string, Buffer>;
  private readonly currentId: string;

  /** `keys[0]` encrypts; every one decrypts. */
  constructor(keys: Buffer[]) {
    this.keys = new Map(keys.map((key) => [payloadKeyId(key), key]));
    this.currentId = payloadKeyId(keys[0]!);
  }

  encode(payloads: Payload[]): Promise<Payload[]> {
    const key = this.keys.get(this.currentId)!;
    return Promise.resolve(
      payloads.map((payload) => {
        const iv = randomBytes(IV_BYTES);
        const cipher = createCipheriv('aes-256-gcm', key, iv);
        const plain = temporal.api.common.v1.Payload.encode(payload).finish();
        const data = Buffer.concat([iv, cipher.update(plain), cipher.final(), cipher.getAuthTag()]);
        return {
          metadata: { encoding: text(ENCRYPTED_ENCODING), [KEY_ID_METADATA]: text(this.currentId) },
          data: new Uint8Array(data),
        };
      })
    );
  }

  /** A wrong or missing key rejects (the executor turns the throw into a rejection). */
  decode(payloads: Payload[]): Promise<Payload[]> {
    return new Promise((resolve) => resolve(payloads.map((payload) => this.decodeOne(payload))));
  }

  private decodeOne(payload: Payload): Payload {
    if (fromBytes(payload.metadata?.encoding) !== ENCRYPTED_ENCODING) return payload;
    const id = fromBytes(payload.metadata?.[KEY_ID_METADATA]) ?? '';
    const key = this.keys.get(id);
    if (!key)
      throw new Error(
        `a payload is encrypted with key ${id}, which is neither ${PAYLOAD_KEY_ENV} nor in ${PAYLOAD_OLD_KEYS_ENV}`
      );
    const data = Buffer.from(payload.data ?? []);
    const decipher = createDecipheriv('aes-256-gcm', key, data.subarray(0, IV_BYTES));
    decipher.setAuthTag(data.subarray(data.length - TAG_BYTES));
    const plain = Buffer.concat([decipher.update(data.subarray(IV_BYTES, data.length - TAG_BYTES)), decipher.final()]);
    return temporal.api.common.v1.Payload.decode(plain);
  }
}

function parseKey(value: string, name: string): Buffer {
  const key = Buffer.from(value.trim(), 'base64');
  if (key.length !== 32) {
    throw new TemporalConfigError(`${name}: not 32 bytes in base64 (make one with \`openssl rand -base64 32\`)`);
  }
  return key;
}

/** The codec the environment configures (ROLLOUT_PAYLOAD_KEY, ROLLOUT_PAYLOAD_OLD_KEYS), or none. */
export function payloadCodecFromEnv(env: NodeJS.ProcessEnv = process.env): EncryptionCodec | undefined {
  const current = env[PAYLOAD_KEY_ENV];
  if (!current) return undefined;
  const old = (env[PAYLOAD_OLD_KEYS_ENV] ?? '')
    .split(',')
    .filter((value) => value.trim())
    .map((value) => parseKey(value, PAYLOAD_OLD_KEYS_ENV));
  return new EncryptionCodec([parseKey(current, PAYLOAD_KEY_ENV), ...old]);
}

/** The data converter of every client and worker Rollout makes: encrypting when a key is configured. */
export function rolloutDataConverter(env: NodeJS.ProcessEnv = process.env): DataConverter {
  const codec = payloadCodecFromEnv(env);
  return codec ? { payloadCodecs: [codec] } : {};
}
