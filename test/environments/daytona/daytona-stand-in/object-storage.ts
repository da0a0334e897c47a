/**
 * The S3-compatible object storage behind Daytona's `/object-storage/push-access`: where the SDK's ObjectStorage
 * (the AWS SDK's S3 client, path-style) puts an Image's build context archives before a build. The subset it calls:
 * ListObjectsV2 (is a context there already?), PutObject, and multipart uploads (lib-storage, for large contexts);
 * bodies in AWS's chunked encoding (the client's default checksums) or plain. Objects are kept in memory.
 */
import { createHash, randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';

export class ObjectStorage {
  private readonly objects = new Map<string, Buffer>();
  private readonly uploads = new Map<string, Map<number, Buffer>>();

  /** An object by bucket and key, or undefined. */
  get(bucket: string, key: string): Buffer | undefined {
    return this.objects.get(`${bucket}/${key}`);
  }

  /** Serves `/<bucket>/<key...>?query` (the part of the URL after the storage's own prefix). */
  async handle(request: IncomingMessage, response: ServerResponse, pathname: string, query: URLSearchParams) {
    const [bucket = '', ...rest] = pathname.replace(/^\/+/, '').split('/');
    const key = rest.map(decodeURIComponent).join('/');
    const body = decodeBody(request, await readAll(request));
    if (request.method === 'GET' && !key && query.get('list-type') === '2') {
      const prefix = query.get('prefix') ?? '';
      const keys = [...this.objects.keys()]
        .filter((name) => name.startsWith(`${bucket}/${prefix}`))
        .slice(0, Number(query.get('max-keys') ?? 1000));
      const contents = keys
        .map(
          (name) =>
            `<Contents><Key>${xml(name.slice(bucket.length + 1))}</Key><Size>${this.objects.get(name)!.length}</Size></Contents>`
        )
        .join('');
      return reply(
        response,
        200,
        `<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>${xml(bucket)}</Name>` +
          `<Prefix>${xml(prefix)}</Prefix><KeyCount>${keys.length}</KeyCount><MaxKeys>${keys.length}</MaxKeys>` +
          `<IsTruncated>false</IsTruncated>${contents}</ListBucketResult>`
      );
    }
    if (request.method === 'POST' && query.has('uploads')) {
      const uploadId = randomUUID();
      this.uploads.set(uploadId, new Map());
      return reply(
        response,
        200,
        `<InitiateMultipartUploadResult><Bucket>${xml(bucket)}</Bucket><Key>${xml(key)}</Key>` +
          `<UploadId>${uploadId}</UploadId></InitiateMultipartUploadResult>`
      );
    }
    const uploadId = query.get('uploadId');
    if (request.method === 'PUT' && uploadId) {
      const parts = this.uploads.get(uploadId);
      if (!parts) return reply(response, 404, '<Error><Code>NoSuchUpload</Code></Error>');
      parts.set(Number(query.get('partNumber')), body);
      response.setHeader('ETag', etag(body));
      return reply(response, 200, '');
    }
    if (request.method === 'POST' && uploadId) {
      const parts = this.uploads.get(uploadId);
      if (!parts) return reply(response, 404, '<Error><Code>NoSuchUpload</Code></Error>');
      const whole = Buffer.concat([...parts.entries()].sort(([a], [b]) => a - b).map(([, part]) => part));
      this.uploads.delete(uploadId);
      this.objects.set(`${bucket}/${key}`, whole);
      return reply(
        response,
        200,
        `<CompleteMultipartUploadResult><Bucket>${xml(bucket)}</Bucket><Key>${xml(key)}</Key>` +
          `<ETag>${etag(whole)}</ETag></CompleteMultipartUploadResult>`
      );
    }
    if (request.method === 'PUT' && key) {
      this.objects.set(`${bucket}/${key}`, body);
      response.setHeader('ETag', etag(body));
      return reply(response, 200, '');
    }
    return reply(
      response,
      400,
      `<Error><Code>NotImplemented</Code><Message>${xml(request.method ?? '')}</Message></Error>`
    );
  }
}

function readAll(request: IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.once('end', () => resolve(Buffer.concat(chunks)));
    request.once('error', reject);
  });
}

/** The payload of a body in AWS's chunked encoding (`<hex size>[;chunk-signature=...]\r\n<data>\r\n`... trailers). */
function decodeBody(request: IncomingMessage, body: Buffer): Buffer {
  const encoding = String(request.headers['content-encoding'] ?? '');
  const sha = String(request.headers['x-amz-content-sha256'] ?? '');
  if (!encoding.includes('aws-chunked') && !sha.startsWith('STREAMING-')) return body;
  const parts: Buffer[] = [];
  let at = 0;
  for (;;) {
    const lineEnd = body.indexOf('\r\n', at);
    if (lineEnd < 0) break;
    const size = parseInt(body.subarray(at, lineEnd).toString('latin1').split(';')[0]!, 16);
    if (!size) break;
    parts.push(body.subarray(lineEnd + 2, lineEnd + 2 + size));
    at = lineEnd + 2 + size + 2;
  }
  return Buffer.concat(parts);
}

function etag(body: Buffer): string {
  return `"${createHash('md5').update(body).digest('hex')}"`;
}

function xml(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

function reply(response: ServerResponse, status: number, body: string): void {
  response.writeHead(status, { 'Content-Type': 'application/xml' });
  response.end(body ? `<?xml version="1.0" encoding="UTF-8"?>${body}` : '');
}
