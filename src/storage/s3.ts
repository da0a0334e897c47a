/**
 * The Store of an S3-compatible object store (AWS S3, GCS interop, R2, MinIO, …) through the AWS SDK, loaded only
 * when a job lives in one. Credentials, region and endpoint come the SDK's usual way (AWS_ACCESS_KEY_ID…,
 * AWS_PROFILE, AWS_REGION, AWS_ENDPOINT_URL): Rollout never reads, stores or logs them.
 */
import { createReadStream, createWriteStream } from 'node:fs';
import { mkdir, rename, rm } from 'node:fs/promises';
import path from 'node:path';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';

import {
  DeleteObjectsCommand,
  GetObjectCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
} from '@aws-sdk/client-s3';
import { Upload } from '@aws-sdk/lib-storage';

import type { S3Location } from './location';
import type { Store, StoredFile } from '../contracts/store';
import { temporarySibling } from './temporary';

/** Parts of a streamed upload: S3's minimum part size, a few in flight (memory stays at a few parts). */
const PART_BYTES = 8 * 2 ** 20;
const PARTS_IN_FLIGHT = 4;
/** DeleteObjects takes at most this many keys per call. */
const DELETE_BATCH = 1000;

let client: S3Client | undefined;

/** One client per process: it keeps its connections and resolved credentials. */
export function s3Client(): S3Client {
  const endpoint = process.env.AWS_ENDPOINT_URL_S3 ?? process.env.AWS_ENDPOINT_URL;
  const region = process.env.AWS_REGION ?? process.env.AWS_DEFAULT_REGION;
  // Rollout supports Node 20 (package.json engines): the SDK's notice that its 2027 releases will not is not for
  // Rollout's users, and would be a second line on stderr of every command that uses a store.
  process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';
  client ??= new S3Client({
    // A profile may name the region; without either, S3's own default rather than "Region is missing".
    ...(region || process.env.AWS_PROFILE ? (region ? { region } : {}) : { region: 'us-east-1' }),
    // Stores other than AWS (MinIO, R2, GCS interop) are reached by path (no bucket DNS name), and some of them
    // reject the flexible checksums the SDK would otherwise add to every request.
    ...(endpoint
      ? {
          forcePathStyle: true,
          requestChecksumCalculation: 'WHEN_REQUIRED' as const,
          responseChecksumValidation: 'WHEN_REQUIRED' as const,
        }
      : {}),
    requestHandler: { connectionTimeout: 10_000 },
  });
  return client;
}

function isNotFound(err: unknown): boolean {
  const error = err as { name?: string; $metadata?: { httpStatusCode?: number } };
  return error.name === 'NoSuchKey' || error.name === 'NotFound' || error.$metadata?.httpStatusCode === 404;
}

export class S3Store implements Store {
  private readonly bucket: string;
  private readonly base: string;

  constructor(
    readonly root: string,
    location: S3Location
  ) {
    this.bucket = location.bucket;
    this.base = location.prefix ? `${location.prefix}/` : '';
  }

  private async get(key: string): Promise<Readable | undefined> {
    try {
      const response = await s3Client().send(new GetObjectCommand({ Bucket: this.bucket, Key: this.base + key }));
      return response.Body as Readable;
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw err;
    }
  }

  async read(key: string): Promise<Buffer | undefined> {
    const body = await this.get(key);
    if (!body) return undefined;
    const chunks: Buffer[] = [];
    for await (const chunk of body) chunks.push(chunk as Buffer);
    return Buffer.concat(chunks);
  }

  /** A PUT replaces an object whole: readers get the old or the new. */
  async write(key: string, body: string | Buffer): Promise<void> {
    await s3Client().send(new PutObjectCommand({ Bucket: this.bucket, Key: this.base + key, Body: body }));
  }

  async upload(key: string, localFile: string): Promise<void> {
    const upload = new Upload({
      client: s3Client(),
      params: { Bucket: this.bucket, Key: this.base + key, Body: createReadStream(localFile) },
      partSize: PART_BYTES,
      queueSize: PARTS_IN_FLIGHT,
      // A failed multipart upload is aborted, its parts freed (a killed process leaves them to the bucket's
      // lifecycle rule for incomplete uploads; they are never visible as an object).
      leavePartsOnError: false,
    });
    await upload.done();
  }

  async download(key: string, localFile: string): Promise<boolean> {
    const body = await this.get(key);
    if (!body) return false;
    await mkdir(path.dirname(localFile), { recursive: true });
    const temporary = temporarySibling(localFile);
    try {
      await pipeline(body, createWriteStream(temporary));
      await rename(temporary, localFile);
    } catch (err) {
      await rm(temporary, { force: true });
      throw err;
    }
    return true;
  }

  async list(prefix: string): Promise<StoredFile[]> {
    const files: StoredFile[] = [];
    let token: string | undefined;
    do {
      const page = await s3Client().send(
        new ListObjectsV2Command({ Bucket: this.bucket, Prefix: this.base + prefix, ContinuationToken: token })
      );
      for (const object of page.Contents ?? []) {
        if (!object.Key) continue;
        files.push({ key: object.Key.slice(this.base.length), size: object.Size ?? 0, version: object.ETag ?? '' });
      }
      token = page.IsTruncated ? page.NextContinuationToken : undefined;
    } while (token);
    return files;
  }

  async remove(keys: string[]): Promise<void> {
    for (let start = 0; start < keys.length; start += DELETE_BATCH) {
      const batch = keys.slice(start, start + DELETE_BATCH);
      const response = await s3Client().send(
        new DeleteObjectsCommand({
          Bucket: this.bucket,
          Delete: { Objects: batch.map((key) => ({ Key: this.base + key })), Quiet: true },
        })
      );
      const failed = response.Errors?.[0];
      if (failed) throw new Error(`s3://${this.bucket}/${failed.Key}: not deleted: ${failed.Code} ${failed.Message}`);
    }
  }
}
