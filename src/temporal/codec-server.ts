/**
 * `rollout codec-server`: Temporal's codec-server protocol, so the Temporal UI (and `temporal workflow show
 * --codec-endpoint`) shows encrypted payloads to people who hold the key. POST /encode and /decode take and return
 * `{"payloads": [{"metadata": {"<key>": "<base64>"}, "data": "<base64>"}]}` (protobuf JSON); CORS lets the UI's
 * origins call it from the browser.
 */
import http from 'node:http';

import type { Payload, PayloadCodec } from '@temporalio/common';

interface JsonPayload {
  metadata?: Record<string, string> | null;
  data?: string | null;
}

function fromJson({ metadata, data }: JsonPayload): Payload {
  return {
    metadata: metadata
      ? Object.fromEntries(Object.entries(metadata).map(([key, value]) => [key, Buffer.from(value, 'base64')]))
      : undefined,
    data: data ? Buffer.from(data, 'base64') : undefined,
  };
}

function toJson({ metadata, data }: Payload): JsonPayload {
  return {
    metadata: metadata
      ? Object.fromEntries(
          Object.entries(metadata).map(([key, value]) => [key, Buffer.from(value ?? []).toString('base64')])
        )
      : undefined,
    data: data ? Buffer.from(data).toString('base64') : undefined,
  };
}

/** Largest request body accepted (the server's payload limit is 2 MB; base64 and a batch add to it). */
const MAX_BODY_BYTES = 16 * 1024 * 1024;

export interface CodecServerOptions {
  codec: PayloadCodec;
  /** Origins allowed to call from a browser (the Temporal UI's); `*` allows any. */
  origins: string[];
}

export function createCodecServer({ codec, origins }: CodecServerOptions): http.Server {
  return http.createServer((req, res) => {
    const origin = req.headers.origin;
    if (origin && (origins.includes('*') || origins.includes(origin))) {
      res.setHeader('Access-Control-Allow-Origin', origin);
      res.setHeader('Access-Control-Allow-Credentials', 'true');
      res.setHeader('Access-Control-Allow-Methods', 'POST, OPTIONS');
      res.setHeader('Access-Control-Allow-Headers', 'X-Namespace, Content-Type, Authorization');
      res.setHeader('Vary', 'Origin');
    }
    if (req.method === 'OPTIONS') return void res.writeHead(204).end();
    const route = req.url?.split('?')[0]?.replace(/\/+$/, '').split('/').pop();
    if (req.method !== 'POST' || (route !== 'encode' && route !== 'decode'))
      return void res.writeHead(404, { 'Content-Type': 'text/plain' }).end('POST /encode or /decode\n');
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > MAX_BODY_BYTES) {
        res.writeHead(413).end();
        req.destroy();
      } else chunks.push(chunk);
    });
    req.on('end', () => {
      if (res.writableEnded) return;
      void (async () => {
        try {
          const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { payloads?: JsonPayload[] };
          if (!Array.isArray(body.payloads)) throw new Error('the body has no "payloads" list');
          const payloads = body.payloads.map(fromJson);
          const result = route === 'encode' ? await codec.encode(payloads) : await codec.decode(payloads);
          res
            .writeHead(200, { 'Content-Type': 'application/json' })
            .end(JSON.stringify({ payloads: result.map(toJson) }));
        } catch (err) {
          res.writeHead(400, { 'Content-Type': 'text/plain' }).end(`${(err as Error).message.split('\n')[0]}\n`);
        }
      })();
    });
  });
}
