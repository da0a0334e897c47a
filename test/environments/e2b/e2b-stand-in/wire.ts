/**
 * The wire formats of the E2B stand-in: JSON bodies of its REST API, and the Connect protocol (connectrpc.com) that
 * envd's process service speaks, in the JSON encoding the SDK asks for (`useBinaryFormat: false`): a unary call is a
 * JSON body both ways; a server-streaming call's request and replies are envelopes (a flags byte, a 4-byte big-endian
 * length, a JSON message), the last reply an end-of-stream envelope (flags 2) carrying the error, if any.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';

/** Connect's end-of-stream envelope flag. */
const END_STREAM = 0b10;

export async function readBody(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

export async function readJson<T>(req: IncomingMessage): Promise<T> {
  const body = await readBody(req);
  return (body.length ? JSON.parse(body.toString('utf8')) : {}) as T;
}

export function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = body === undefined ? '' : JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

/** A reply without a body (openapi-fetch reads none when the length says 0). */
export function sendEmpty(res: ServerResponse, status: number): void {
  res.writeHead(status, { 'content-length': 0 }).end();
}

/** E2B's REST error body: `{ code, message }` with the HTTP status as code. */
export function sendApiError(res: ServerResponse, status: number, message: string): void {
  sendJson(res, status, { code: status, message });
}

/** A Connect error code (not_found, invalid_argument, ...) and its HTTP status, for unary replies. */
const CONNECT_STATUS: Record<string, number> = {
  not_found: 404,
  invalid_argument: 400,
  unauthenticated: 401,
  failed_precondition: 400,
  unavailable: 503,
  internal: 500,
};

export function sendConnectError(res: ServerResponse, code: string, message: string): void {
  sendJson(res, CONNECT_STATUS[code] ?? 500, { code, message });
}

export function envelope(json: unknown, flags = 0): Buffer {
  const data = Buffer.from(JSON.stringify(json));
  const head = Buffer.alloc(5);
  head.writeUInt8(flags, 0);
  head.writeUInt32BE(data.length, 1);
  return Buffer.concat([head, data]);
}

export function endOfStream(error?: { code: string; message: string }): Buffer {
  return envelope(error ? { error } : {}, END_STREAM);
}

/** The one request message of a server-streaming call. */
export function firstMessage<T>(body: Buffer): T {
  if (body.length < 5) throw new Error('missing request envelope');
  const length = body.readUInt32BE(1);
  return JSON.parse(body.subarray(5, 5 + length).toString('utf8')) as T;
}

/** The user of an envd call: HTTP Basic `user:` (the SDK's authenticationHeader), else the sandbox's default. */
export function basicUser(req: IncomingMessage): string | undefined {
  const header = req.headers.authorization;
  if (!header?.startsWith('Basic ')) return undefined;
  const decoded = Buffer.from(header.slice('Basic '.length), 'base64').toString('utf8');
  return decoded.split(':')[0] || undefined;
}
