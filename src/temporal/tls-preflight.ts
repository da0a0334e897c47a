/**
 * A TLS handshake with the Temporal frontend before the SDK connects, with the same certificates: the SDK reports a
 * refused client certificate only as "Failed to connect before the deadline", after its whole connect timeout. Here
 * the server's TLS alert (or the failed verification of its certificate) becomes one line naming the setting, at
 * once. The handshake offers HTTP/2 (gRPC's ALPN), sends gRPC's first bytes and waits for the server's answer: with
 * TLS 1.3 a server refuses a client certificate only after the client's side of the handshake is done.
 */
import type { TLSConfig } from '@temporalio/client';
import { isIP } from 'node:net';
import { connect } from 'node:tls';

import type { ProfileSetting } from './envconfig';
import { TemporalConfigError } from './envconfig';

const TIMEOUT_MS = 10_000;

/**
 * Resolves once the server answered over TLS; throws TemporalConfigError for a refusal it can name. A timeout or an
 * error it cannot name resolves too: the SDK's own connect then reports it.
 */
export async function tlsPreflight(
  address: string,
  tls: TLSConfig | true,
  where: (setting: ProfileSetting) => string
): Promise<void> {
  const config = tls === true ? {} : tls;
  const error = await handshake(address, config);
  if (!error) return;
  const message = refusal(address, config, error, where);
  if (message) throw new TemporalConfigError(message, { cause: error });
}

/** gRPC's first bytes: the HTTP/2 client preface and an empty SETTINGS frame. */
const HTTP2_PREFACE = Buffer.concat([
  Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'),
  Buffer.from([0, 0, 0, 4, 0, 0, 0, 0, 0]),
]);

function handshake(address: string, tls: TLSConfig): Promise<NodeJS.ErrnoException | null> {
  const { host, port } = hostAndPort(address);
  return new Promise((resolve) => {
    const socket = connect({
      host,
      port,
      servername: tls.serverNameOverride ?? (isIP(host) ? undefined : host),
      ALPNProtocols: ['h2'],
      // Without a CA of its own, the SDK trusts roots this process may not hold: leave that verdict to the SDK.
      ...(tls.serverRootCACertificate
        ? { ca: Buffer.from(tls.serverRootCACertificate) }
        : { rejectUnauthorized: false }),
      ...(tls.clientCertPair
        ? { cert: Buffer.from(tls.clientCertPair.crt), key: Buffer.from(tls.clientCertPair.key) }
        : {}),
    });
    const done = (error: NodeJS.ErrnoException | null) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(error);
    };
    const timer = setTimeout(() => done(null), TIMEOUT_MS);
    socket.once('secureConnect', () => socket.write(HTTP2_PREFACE));
    socket.once('data', () => done(null));
    socket.once('error', (err: NodeJS.ErrnoException) => done(err));
    socket.once('close', () => done(null));
  });
}

function hostAndPort(address: string): { host: string; port: number } {
  const match = /^\[?(.*?)\]?:(\d+)$/.exec(address);
  return match ? { host: match[1]!, port: Number(match[2]) } : { host: address, port: 7233 };
}

/** The line for a refusal, or null when the error names nothing the configuration can fix. */
function refusal(
  address: string,
  tls: TLSConfig,
  error: NodeJS.ErrnoException,
  where: (setting: ProfileSetting) => string
): string | null {
  const code = error.code ?? '';
  const at = `Temporal at ${address} (${where('address')})`;
  if (/CERTIFICATE_REQUIRED/.test(code))
    return tls.clientCertPair
      ? `${at} did not accept the client certificate of ${where('tls.client_cert')}`
      : `${at} requires a client certificate: set TEMPORAL_TLS_CLIENT_CERT_PATH and TEMPORAL_TLS_CLIENT_KEY_PATH ` +
          '(or tls.client_cert_path and tls.client_key_path in the profile)';
  if (/ALERT_(BAD_CERTIFICATE|UNKNOWN_CA|CERTIFICATE_UNKNOWN|UNSUPPORTED_CERTIFICATE|DECRYPT_ERROR)/.test(code))
    return `${at} refused the client certificate of ${where('tls.client_cert')} (${alertName(code)})`;
  if (code === 'ERR_TLS_CERT_ALTNAME_INVALID')
    return `${at}: its TLS certificate does not name ${tls.serverNameOverride ?? address.replace(/:\d+$/, '')} (TEMPORAL_TLS_SERVER_NAME)`;
  if (/CERT|SELF_SIGNED|UNABLE_TO_(GET_ISSUER|VERIFY)/.test(code) && tls.serverRootCACertificate)
    return `${at}: its TLS certificate is not signed by the CA of ${where('tls.server_ca_cert')} (${code})`;
  if (/WRONG_VERSION_NUMBER|PACKET_LENGTH_TOO_LONG/.test(code))
    return `Temporal unreachable at ${address} (${where('address')}, TLS): the server does not speak TLS`;
  if (code === 'ECONNREFUSED' || code === 'ENOTFOUND' || code === 'EHOSTUNREACH')
    return `Temporal unreachable at ${address} (${where('address')}): ${code}`;
  return null;
}

function alertName(code: string): string {
  return code
    .replace(/^ERR_SSL_(TLSV1\d?_)?ALERT_/, '')
    .toLowerCase()
    .replace(/_/g, ' ');
}
