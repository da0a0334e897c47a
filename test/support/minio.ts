/**
 * A real S3-compatible server for the tests: MinIO, built from its Go module by scripts/setup-tests.sh, on a port and
 * data folder of this checkout's own (beside its Temporal test server's), so checkouts never share one. Started once
 * per test file and stopped after it; a server this checkout left running (a killed test run) is stopped first.
 */
import type { ChildProcess } from 'node:child_process';
import { spawn } from 'node:child_process';
import { access, mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import path from 'node:path';

import { CreateBucketCommand, ListMultipartUploadsCommand, ListObjectsV2Command, S3Client } from '@aws-sdk/client-s3';

import { REPO_ROOT, TEST_SERVER } from './temporal';
import { waitFor } from './wait';

/** The MinIO commit setup-tests.sh builds (the module proxy serves MinIO's releases as pseudo-versions only). */
export const MINIO_VERSION = 'v0.0.0-20260212201848-7aac2a2c5b7c';
const ACCESS_KEY = 'rollout-test';
const SECRET_KEY = 'rollout-test-secret';

export interface TestStore {
  endpoint: string;
  /** What a process needs to use the store: the AWS SDK's usual variables. */
  env: Record<string, string>;
  client: S3Client;
  createBucket(name: string): Promise<void>;
  /** Every object under the prefix, key → size. */
  objects(bucket: string, prefix: string): Promise<Map<string, number>>;
  /** Keys of multipart uploads under way (or abandoned) under the prefix. */
  uploadsUnderWay(bucket: string, prefix: string): Promise<string[]>;
  stop(): Promise<void>;
}

/** Where setup-tests.sh puts the binary (ROLLOUT_MINIO_BIN overrides). */
export function minioBinary(): string {
  const cache = process.env.ROLLOUT_CACHE_DIR ?? path.join(homedir(), '.cache', 'rollout');
  return process.env.ROLLOUT_MINIO_BIN ?? path.join(cache, 'minio', MINIO_VERSION, 'minio');
}

/** The S3 port: a few above this checkout's Temporal test port (its cluster uses +103, UI +1000). */
const MINIO_PORT = TEST_SERVER.port + 20;
const STATE_DIR = path.join(REPO_ROOT, '.rollout-test', 'minio');
const PID_FILE = path.join(STATE_DIR, 'minio.pid');

async function stopLeftOver(): Promise<void> {
  const pid = Number(await readFile(PID_FILE, 'utf8').catch(() => ''));
  if (!pid) return;
  try {
    process.kill(pid, 'SIGTERM');
  } catch {
    // Already gone.
  }
  await rm(PID_FILE, { force: true });
}

/** host: the address it serves on (a cluster's pods reach this host at the node's address, not 127.0.0.1). */
export async function startTestStore(host = '127.0.0.1'): Promise<TestStore> {
  const binary = minioBinary();
  await access(binary).catch(() => {
    throw new Error(`no MinIO binary at ${binary}: run scripts/setup-tests.sh (it builds it with Go)`);
  });
  await stopLeftOver();
  await mkdir(STATE_DIR, { recursive: true });
  const endpoint = `http://${host}:${MINIO_PORT}`;
  const child: ChildProcess = spawn(
    binary,
    [
      'server',
      path.join(STATE_DIR, 'data'),
      '--address',
      `${host}:${MINIO_PORT}`,
      '--console-address',
      `${host}:${MINIO_PORT + 1}`,
      '--quiet',
    ],
    {
      env: { ...process.env, MINIO_ROOT_USER: ACCESS_KEY, MINIO_ROOT_PASSWORD: SECRET_KEY, MINIO_BROWSER: 'off' },
      stdio: 'ignore',
    }
  );
  await writeFile(PID_FILE, String(child.pid));
  await waitFor(
    `MinIO on ${endpoint}`,
    () =>
      fetch(`${endpoint}/minio/health/live`).then(
        (response) => response.ok,
        () => false
      ),
    60_000
  );
  const env = {
    AWS_ACCESS_KEY_ID: ACCESS_KEY,
    AWS_SECRET_ACCESS_KEY: SECRET_KEY,
    AWS_ENDPOINT_URL: endpoint,
    AWS_REGION: 'us-east-1',
  };
  const client = new S3Client({
    endpoint,
    region: 'us-east-1',
    forcePathStyle: true,
    credentials: { accessKeyId: ACCESS_KEY, secretAccessKey: SECRET_KEY },
  });
  return {
    endpoint,
    env,
    client,
    async createBucket(name) {
      await client.send(new CreateBucketCommand({ Bucket: name })).catch((err: { name?: string }) => {
        if (err.name !== 'BucketAlreadyOwnedByYou') throw err;
      });
    },
    async objects(bucket, prefix) {
      const objects = new Map<string, number>();
      let token: string | undefined;
      do {
        const page = await client.send(
          new ListObjectsV2Command({ Bucket: bucket, Prefix: prefix, ContinuationToken: token })
        );
        for (const object of page.Contents ?? []) objects.set(object.Key!, object.Size ?? 0);
        token = page.IsTruncated ? page.NextContinuationToken : undefined;
      } while (token);
      return objects;
    },
    async uploadsUnderWay(bucket, prefix) {
      const page = await client.send(new ListMultipartUploadsCommand({ Bucket: bucket, Prefix: prefix }));
      return (page.Uploads ?? []).map((upload) => upload.Key!);
    },
    async stop() {
      client.destroy();
      child.kill('SIGTERM');
      await new Promise((resolve) => (child.exitCode === null ? child.once('exit', resolve) : resolve(null)));
      await rm(STATE_DIR, { recursive: true, force: true });
    },
  };
}
