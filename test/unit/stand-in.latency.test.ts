/**
 * The stand-ins' `--latency <ms>` (test/support/latency-proxy.ts): a stand-in's environment is rewritten to point at a
 * relay per local address, every call through it arrives intact and no sooner than the latency after it was sent,
 * and answers pass back. No vendor stand-in needed: an HTTP server records what it receives.
 */
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, it } from 'node:test';

import { delayedEnv } from '../support/latency-proxy';

const LATENCY_MS = 80;

describe('stand-in latency', () => {
  it('rewrites every local address of the environment; each call arrives intact, delayed at least the latency', async () => {
    const received: { at: number; body: string }[] = [];
    const server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (chunk: Buffer) => chunks.push(chunk));
      req.on('end', () => {
        received.push({ at: Date.now(), body: Buffer.concat(chunks).toString() });
        res.end(`echo ${Buffer.concat(chunks).toString()}`);
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as AddressInfo;
    const { env, close } = await delayedEnv(
      { API_URL: `http://127.0.0.1:${port}/v1`, KEY: 'k', OTHER: `localhost:${port}` },
      LATENCY_MS
    );
    try {
      assert.equal(env.KEY, 'k');
      assert.match(env.API_URL!, /^http:\/\/127\.0\.0\.1:\d+\/v1$/);
      assert.notEqual(env.API_URL, `http://127.0.0.1:${port}/v1`);
      assert.doesNotMatch(env.OTHER!, new RegExp(`:${port}$`));
      const big = 'x'.repeat(300_000);
      for (const body of ['one', big, 'three']) {
        const sent = Date.now();
        const res = await fetch(`${env.API_URL}/call`, { method: 'POST', body });
        assert.equal(await res.text(), `echo ${body}`);
        const arrival = received.at(-1)!;
        assert.equal(arrival.body, body);
        assert.ok(arrival.at - sent >= LATENCY_MS - 1, `arrived ${arrival.at - sent} ms after it was sent`);
      }
    } finally {
      await close();
      server.close();
    }
  });
});
