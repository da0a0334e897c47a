#!/usr/bin/env node
// The local key set of `scripts/temporal-cluster.sh up --auth`: the Temporal server's default JWT claim mapper reads
// RS256 tokens whose keys it fetches as a JWKS over HTTP (`global.authorization.jwtKeyProvider.keySourceURIs`).
//
//   temporal-jwt.js keys  <dir>                 RSA key pair (jwt.key) and its JWKS (jwks.json), once
//   temporal-jwt.js token <dir> <permission>…   a token signed with jwt.key, e.g. `default:admin`, `temporal-system:admin`
//   temporal-jwt.js serve <dir> <ip> <port>     serves jwks.json (and nothing else) until killed
const { createPrivateKey, createPublicKey, generateKeyPairSync, sign } = require('node:crypto');
const { existsSync, readFileSync, writeFileSync } = require('node:fs');
const http = require('node:http');
const path = require('node:path');

const KEY_ID = 'rollout-local';
const TOKEN_DAYS = 30;

const b64url = (data) => Buffer.from(data).toString('base64url');

function keys(dir) {
  const keyFile = path.join(dir, 'jwt.key');
  if (!existsSync(keyFile)) {
    const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
    writeFileSync(keyFile, privateKey.export({ type: 'pkcs8', format: 'pem' }), { mode: 0o600 });
  }
  const jwk = createPublicKey(createPrivateKey(readFileSync(keyFile))).export({ format: 'jwk' });
  const jwks = { keys: [{ ...jwk, kid: KEY_ID, use: 'sig', alg: 'RS256' }] };
  writeFileSync(path.join(dir, 'jwks.json'), JSON.stringify(jwks));
}

function token(dir, permissions) {
  const now = Math.floor(Date.now() / 1000);
  const header = b64url(JSON.stringify({ alg: 'RS256', typ: 'JWT', kid: KEY_ID }));
  const claims = { sub: 'rollout-local', iat: now, exp: now + TOKEN_DAYS * 86400, permissions };
  const body = `${header}.${b64url(JSON.stringify(claims))}`;
  const signature = sign('sha256', Buffer.from(body), createPrivateKey(readFileSync(path.join(dir, 'jwt.key'))));
  process.stdout.write(`${body}.${b64url(signature)}\n`);
}

function serve(dir, ip, port) {
  const jwks = readFileSync(path.join(dir, 'jwks.json'));
  http
    .createServer((req, res) => {
      if (req.url !== '/jwks.json') return res.writeHead(404).end();
      res.writeHead(200, { 'content-type': 'application/json' }).end(jwks);
    })
    .listen(Number(port), ip);
}

const [command, dir, ...rest] = process.argv.slice(2);
if (command === 'keys' && dir) keys(dir);
else if (command === 'token' && dir && rest.length) token(dir, rest);
else if (command === 'serve' && dir && rest.length === 2) serve(dir, rest[0], rest[1]);
else {
  console.error('usage: temporal-jwt.js keys <dir> | token <dir> <permission>... | serve <dir> <ip> <port>');
  process.exit(2);
}
