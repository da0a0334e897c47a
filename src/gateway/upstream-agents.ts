/**
 * The HTTP agents the gateway (and the preflight) reach upstreams with: keep-alive connections, and the proxy that
 * HTTPS_PROXY / HTTP_PROXY / NO_PROXY name for the upstream's URL (companies whose egress goes through a proxy).
 */
import http from 'node:http';
import https from 'node:https';

import { HttpProxyAgent } from 'http-proxy-agent';
import { HttpsProxyAgent } from 'https-proxy-agent';
import { getProxyForUrl } from 'proxy-from-env';

export class UpstreamAgents {
  private readonly direct = {
    http: new http.Agent({ keepAlive: true }),
    https: new https.Agent({ keepAlive: true }),
  };
  private readonly proxied = new Map<string, http.Agent>();

  /** The agent for a request to `target`: through the proxy the environment names for it, else direct. */
  for(target: URL): http.Agent {
    const secure = target.protocol === 'https:';
    const proxy = getProxyForUrl(target.href);
    if (!proxy) return secure ? this.direct.https : this.direct.http;
    const key = `${secure ? 'https' : 'http'} ${proxy}`;
    let agent = this.proxied.get(key);
    if (!agent) {
      agent = secure ? new HttpsProxyAgent(proxy, { keepAlive: true }) : new HttpProxyAgent(proxy, { keepAlive: true });
      this.proxied.set(key, agent);
    }
    return agent;
  }

  destroy(): void {
    this.direct.http.destroy();
    this.direct.https.destroy();
    for (const agent of this.proxied.values()) agent.destroy();
    this.proxied.clear();
  }
}

/** `http` or `https`'s request function for a URL. */
export function requestFor(target: URL): typeof http.request {
  return target.protocol === 'https:' ? https.request : http.request;
}
