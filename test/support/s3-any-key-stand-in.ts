/**
 * A stand-in of an S3 bucket that, like AWS S3 itself, keeps objects under any key, `..` segments, empty segments and
 * backslashes included (MinIO refuses such keys, so the real-server tests cannot hold them). It speaks the wire
 * protocol the AWS SDK uses for what readers do (ListObjectsV2, GetObject) from a fixed set of objects; it ignores
 * request signatures.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface AnyKeyBucket {
  endpoint: string;
  /** What a process needs to reach it through the SDK's usual variables. */
  env: Record<string, string>;
  /** Keys the stand-in was asked for with GetObject. */
  fetched: string[];
  close(): Promise<void>;
}

const xml = (text: string) =>
  text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');

export async function startAnyKeyBucket(bucket: string, objects: Record<string, string>): Promise<AnyKeyBucket> {
  const fetched: string[] = [];
  const etag = (body: string) => `"${Buffer.from(body).toString('hex').slice(0, 32).padEnd(32, '0')}"`;
  const server = http.createServer((request, response) => {
    const url = new URL(request.url ?? '/', 'http://stand-in');
    // The raw path: URL would fold the `..` segments of a key.
    const [first, ...rest] = (request.url ?? '/').split('?')[0]!.slice(1).split('/');
    if (first !== bucket) return response.writeHead(404).end();
    if (rest.length === 0 || (rest.length === 1 && rest[0] === '')) {
      const prefix = url.searchParams.get('prefix') ?? '';
      const urlEncoded = url.searchParams.get('encoding-type') === 'url';
      const keys = Object.keys(objects)
        .filter((key) => key.startsWith(prefix))
        .sort();
      const contents = keys
        .map(
          (key) =>
            `<Contents><Key>${xml(urlEncoded ? encodeURIComponent(key) : key)}</Key>` +
            `<LastModified>2026-11-27T00:00:00.000Z</LastModified><ETag>${xml(etag(objects[key]!))}</ETag>` +
            `<Size>${Buffer.byteLength(objects[key]!)}</Size><StorageClass>STANDARD</StorageClass></Contents>`
        )
        .join('');
      response.writeHead(200, { 'content-type': 'application/xml' });
      response.end(
        `<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">` +
          `<Name>${bucket}</Name><Prefix>${xml(prefix)}</Prefix><KeyCount>${keys.length}</KeyCount>` +
          `<MaxKeys>1000</MaxKeys>${urlEncoded ? '<EncodingType>url</EncodingType>' : ''}` +
          `<IsTruncated>false</IsTruncated>${contents}</ListBucketResult>`
      );
      return;
    }
    const key = rest.map((segment) => decodeURIComponent(segment)).join('/');
    fetched.push(key);
    const body = objects[key];
    if (body === undefined) {
      response.writeHead(404, { 'content-type': 'application/xml' });
      response.end(
        `<?xml version="1.0" encoding="UTF-8"?><Error><Code>NoSuchKey</Code><Message>no such key</Message></Error>`
      );
      return;
    }
    response.writeHead(200, { 'content-length': Buffer.byteLength(body), etag: etag(body) });
    response.end(body);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const endpoint = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    endpoint,
    env: {
      AWS_ENDPOINT_URL: endpoint,
      AWS_ACCESS_KEY_ID: 'stand-in',
      AWS_SECRET_ACCESS_KEY: 'stand-in-secret',
      AWS_REGION: 'us-east-1',
    },
    fetched,
    close: () =>
      new Promise((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
