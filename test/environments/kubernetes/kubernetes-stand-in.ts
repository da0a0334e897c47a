/**
 * A stand-in Kubernetes API server, for the two cases a real cluster (`npm run test:k8s`, scripts/k8s-cluster.sh)
 * cannot be made to produce here: an API server that speaks only the v4 exec protocol (clusters before 1.30), and a
 * kubelet's eviction of a pod (it takes real memory pressure on the node). Everything else runs on the real cluster.
 * It serves the subset of the core v1 API those cases use, over plain HTTP, with real containers of the local Docker
 * engine behind its pods, so @kubernetes/client-node talks to it as to a cluster through a kubeconfig: pods
 * create/get/list/watch/delete (label and field selectors), pod status (Pending, Running and Ready, Failed with
 * Evicted), NetworkPolicy creation (kept, not enforced), and exec over websocket with Kubernetes' channel protocol (v5 with stdin close, or
 * v4) and its status channel. Its "kubelet" runs each pod's one container, from an image the Docker engine has.
 *
 * Fidelity gaps the real cluster showed (kept in mind where the stand-in is still used): a deleted pod's exec ends
 * only once the kubelet has killed its container (seconds later; the stand-in removes it at once); a failed pull
 * goes on to ImagePullBackOff with more events (Pulling, BackOff), and a cluster without DNS adds MissingClusterDNS
 * events; the scheduler's preemption message differs.
 */
import { randomUUID } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { PassThrough } from 'node:stream';

import type { V1Pod } from '@kubernetes/client-node';
import Docker from 'dockerode';
import { WebSocketServer } from 'ws';
import type { WebSocket } from 'ws';

import { apiQuantity } from '../../../src/contracts/quantity';

/** On every container the stand-in runs: whose it is, so a test removes only its own. */
export const STAND_IN_LABEL = 'rollout.k8s-stand-in';

interface PodRecord {
  pod: V1Pod;
  containerId?: string;
}

interface Watcher {
  namespace: string | null;
  matches: (pod: V1Pod) => boolean;
  send: (type: 'ADDED' | 'MODIFIED' | 'DELETED', pod: V1Pod) => void;
}

export interface KubernetesStandIn {
  url: string;
  /** A kubeconfig file naming this server (context "stand-in", namespace as given). */
  kubeconfig: string;
  /** Pods as the API would list them. */
  pods(namespace?: string): V1Pod[];
  /** Fails a pod as a kubelet under memory pressure does: its container is killed, phase Failed, reason Evicted. */
  evict(namespace: string, name: string): Promise<void>;
  /** Deletes a pod as `kubectl delete pod` would. */
  deletePod(namespace: string, name: string): Promise<void>;
  /** Exec sessions opened so far, by negotiated subprotocol. */
  execProtocols: string[];
  /** The request URL of every exec so far (what an API server's audit log and proxies keep). */
  execUrls: string[];
  close(): Promise<void>;
}

export interface StandInOptions {
  /** Where the kubeconfig is written. */
  dir: string;
  namespace?: string;
  /** Exec subprotocols the server accepts, best first (default v5, then v4). */
  protocols?: string[];
}

export async function startKubernetesStandIn(options: StandInOptions): Promise<KubernetesStandIn> {
  const docker = new Docker();
  const id = randomUUID().slice(0, 8);
  const pods = new Map<string, PodRecord>();
  const watchers = new Set<Watcher>();
  const execProtocols: string[] = [];
  const execUrls: string[] = [];
  const protocols = options.protocols ?? ['v5.channel.k8s.io', 'v4.channel.k8s.io'];
  let version = 1;

  const key = (namespace: string, name: string) => `${namespace}/${name}`;
  const changed = (record: PodRecord, type: 'ADDED' | 'MODIFIED' | 'DELETED' = 'MODIFIED') => {
    record.pod.metadata!.resourceVersion = `${++version}`;
    for (const watcher of watchers) {
      if (watcher.namespace !== null && watcher.namespace !== record.pod.metadata!.namespace) continue;
      if (watcher.matches(record.pod)) watcher.send(type, record.pod);
    }
  };
  const setStatus = (record: PodRecord, status: V1Pod['status']) => {
    record.pod.status = { ...record.pod.status, ...status };
    changed(record);
  };

  /** What a kubelet would do with the pod: run its container (from a local image) and watch it. */
  const runPod = async (record: PodRecord): Promise<void> => {
    const { pod } = record;
    const container = pod.spec!.containers[0]!;
    const image = container.image!;
    const limits = container.resources?.limits ?? {};
    const created = await docker.createContainer({
      Image: image,
      ...(container.command ? { Entrypoint: container.command } : {}),
      ...(container.args ? { Cmd: container.args } : {}),
      Env: (container.env ?? []).map((variable) => `${variable.name}=${variable.value ?? ''}`),
      ...(container.workingDir ? { WorkingDir: container.workingDir } : {}),
      Labels: { [STAND_IN_LABEL]: id, 'io.kubernetes.pod.name': pod.metadata!.name! },
      HostConfig: {
        ...(limits.memory ? { Memory: apiQuantity(limits.memory) } : {}),
      },
    });
    record.containerId = created.id;
    if (!pods.has(key(pod.metadata!.namespace!, pod.metadata!.name!))) {
      await created.remove({ force: true });
      return;
    }
    await created.start();
    setStatus(record, {
      phase: 'Running',
      startTime: new Date(),
      conditions: [
        { type: 'PodScheduled', status: 'True' },
        { type: 'Ready', status: 'True' },
      ],
      containerStatuses: [
        {
          name: container.name,
          image,
          imageID: image,
          ready: true,
          restartCount: 0,
          started: true,
          state: { running: { startedAt: new Date() } },
        },
      ],
    });
  };

  /** The kubelet kills the pod's container and records why (eviction). */
  const fail = async (record: PodRecord, reason: string, message: string) => {
    setStatus(record, { phase: 'Failed', reason, message, conditions: [{ type: 'Ready', status: 'False' }] });
    if (record.containerId)
      await docker
        .getContainer(record.containerId)
        .kill()
        .catch(() => undefined);
  };

  const removePod = async (namespace: string, name: string): Promise<V1Pod | undefined> => {
    const record = pods.get(key(namespace, name));
    if (!record) return undefined;
    pods.delete(key(namespace, name));
    if (record.containerId)
      await docker
        .getContainer(record.containerId)
        .remove({ force: true })
        .catch(() => undefined);
    changed(record, 'DELETED');
    return record.pod;
  };

  const networkPolicies = new Set<string>();
  const server = createServer((request, response) => {
    handle(request, response).catch((err: unknown) => {
      if (!response.headersSent) sendStatus(response, 500, 'InternalError', (err as Error).message);
      else response.end();
    });
  });

  const handle = async (request: IncomingMessage, response: ServerResponse): Promise<void> => {
    const url = new URL(request.url ?? '/', 'http://stand-in');
    const parts = url.pathname.split('/').filter(Boolean);
    const method = request.method ?? 'GET';
    const labelSelector = url.searchParams.get('labelSelector');
    const fieldSelector = url.searchParams.get('fieldSelector');
    const matches = (pod: V1Pod) =>
      selects(labelSelector, pod.metadata?.labels ?? {}) &&
      selects(fieldSelector, { 'metadata.name': pod.metadata?.name ?? '' });

    if (url.pathname === '/api/v1/pods' && method === 'GET') {
      return sendPods(response, [...pods.values()].map((r) => r.pod).filter(matches));
    }
    const policy = /^\/apis\/networking\.k8s\.io\/v1\/namespaces\/([^/]+)\/networkpolicies$/.exec(url.pathname);
    if (policy && method === 'POST') {
      // Stored and answered as an API server does (201, then 409); like most network plugins, not enforced.
      const body = JSON.parse(await readBody(request)) as { metadata?: { name?: string } };
      const policyKey = key(policy[1]!, body.metadata?.name ?? '');
      if (networkPolicies.has(policyKey)) return sendStatus(response, 409, 'AlreadyExists', 'networkpolicy exists');
      networkPolicies.add(policyKey);
      return sendJson(response, 201, body);
    }
    if (parts[0] !== 'api' || parts[1] !== 'v1' || parts[2] !== 'namespaces' || !parts[3]) {
      return sendStatus(response, 404, 'NotFound', `the stand-in does not serve ${method} ${url.pathname}`);
    }
    const namespace = parts[3];
    const resource = parts[4];
    const name = parts[5];
    if (resource !== 'pods') return sendStatus(response, 404, 'NotFound', `no resource ${resource}`);

    if (!name && method === 'POST') {
      const pod = JSON.parse(await readBody(request)) as V1Pod;
      const podName = pod.metadata?.name ?? '';
      if (pods.has(key(namespace, podName))) {
        return sendStatus(response, 409, 'AlreadyExists', `pods "${podName}" already exists`);
      }
      pod.apiVersion = 'v1';
      pod.kind = 'Pod';
      pod.metadata = { ...pod.metadata, namespace, uid: randomUUID(), creationTimestamp: new Date() };
      pod.status = { phase: 'Pending' };
      const record: PodRecord = { pod };
      pods.set(key(namespace, podName), record);
      changed(record, 'ADDED');
      sendJson(response, 201, pod);
      void runPod(record).catch((err: unknown) => {
        setStatus(record, { phase: 'Failed', reason: 'StandInError', message: (err as Error).message });
      });
      return;
    }
    if (!name && method === 'GET') {
      const inNamespace = [...pods.values()].map((r) => r.pod).filter((p) => p.metadata?.namespace === namespace);
      if (url.searchParams.get('watch') === 'true') return watch(request, response, namespace, matches, inNamespace);
      return sendPods(response, inNamespace.filter(matches));
    }
    if (!name) return sendStatus(response, 405, 'MethodNotAllowed', `${method} on pods`);
    const record = pods.get(key(namespace, name));
    if (parts[6] === 'exec') return sendStatus(response, 400, 'BadRequest', 'exec needs a websocket upgrade');
    if (!record) return sendStatus(response, 404, 'NotFound', `pods "${name}" not found`);
    if (method === 'GET') return sendJson(response, 200, record.pod);
    if (method === 'DELETE') return sendJson(response, 200, await removePod(namespace, name));
    return sendStatus(response, 405, 'MethodNotAllowed', `${method} on a pod`);
  };

  /** Newline-delimited watch events: every matching pod as ADDED first, then changes as they happen. */
  const watch = (
    request: IncomingMessage,
    response: ServerResponse,
    namespace: string,
    matches: (pod: V1Pod) => boolean,
    current: V1Pod[]
  ) => {
    response.writeHead(200, { 'Content-Type': 'application/json', 'Transfer-Encoding': 'chunked' });
    const watcher: Watcher = {
      namespace,
      matches,
      send: (type, pod) => response.write(`${JSON.stringify({ type, object: pod })}\n`),
    };
    for (const pod of current.filter(matches)) watcher.send('ADDED', pod);
    watchers.add(watcher);
    request.once('close', () => watchers.delete(watcher));
  };

  const sockets = new WebSocketServer({
    noServer: true,
    handleProtocols: (offered) => protocols.find((protocol) => offered.has(protocol)) ?? false,
  });
  server.on('upgrade', (request, socket, head) => {
    const url = new URL(request.url ?? '/', 'http://stand-in');
    execUrls.push(request.url ?? '');
    const match = /^\/api\/v1\/namespaces\/([^/]+)\/pods\/([^/]+)\/exec$/.exec(url.pathname);
    const record = match ? pods.get(key(match[1]!, match[2]!)) : undefined;
    if (!record?.containerId) {
      socket.end('HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n');
      return;
    }
    const containerId = record.containerId;
    sockets.handleUpgrade(request, socket, head, (ws) => {
      execProtocols.push(ws.protocol);
      serveExec(docker, ws, containerId, url.searchParams).catch(() => ws.close());
    });
  });

  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const kubeconfig = path.join(options.dir, `kubeconfig-stand-in-${id}`);
  await writeFile(
    kubeconfig,
    JSON.stringify({
      apiVersion: 'v1',
      kind: 'Config',
      // Plain HTTP: client-node allows it only with TLS verification off (there is no TLS to verify).
      clusters: [{ name: 'stand-in', cluster: { server: address, 'insecure-skip-tls-verify': true } }],
      users: [{ name: 'stand-in', user: { token: 'stand-in' } }],
      contexts: [
        {
          name: 'stand-in',
          context: { cluster: 'stand-in', user: 'stand-in', namespace: options.namespace ?? 'default' },
        },
      ],
      'current-context': 'stand-in',
    })
  );

  return {
    url: address,
    kubeconfig,
    execProtocols,
    execUrls,
    pods: (namespace) =>
      [...pods.values()].map((r) => r.pod).filter((p) => !namespace || p.metadata?.namespace === namespace),
    async evict(namespace, name) {
      const record = pods.get(key(namespace, name));
      if (record) await fail(record, 'Evicted', 'The node was low on resource: memory.');
    },
    async deletePod(namespace, name) {
      await removePod(namespace, name);
    },
    async close() {
      for (const record of [...pods.values()]) {
        await removePod(record.pod.metadata!.namespace!, record.pod.metadata!.name!);
      }
      // Containers of pods whose creation raced the close.
      const left = await docker.listContainers({ all: true, filters: { label: [`${STAND_IN_LABEL}=${id}`] } });
      for (const container of left) await docker.getContainer(container.Id).remove({ force: true });
      for (const client of sockets.clients) client.terminate();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/**
 * One exec session: the command runs as a Docker exec in the pod's container. Channels: 0 stdin, 1 stdout, 2 stderr,
 * 3 status (a v1 Status as JSON, then the socket closes); v5 adds 255 "close stream" (stdin's end).
 */
async function serveExec(docker: Docker, ws: WebSocket, containerId: string, query: URLSearchParams): Promise<void> {
  const command = query.getAll('command');
  const stdin = query.get('stdin') === 'true';
  // Input can arrive before the Docker exec is up: held until then.
  const pending: Buffer[] = [];
  const session: { input?: (data: Buffer) => void } = {};
  ws.on('message', (data: Buffer) => (session.input ? session.input(data) : pending.push(data)));
  const status = (body: Record<string, unknown>) => {
    ws.send(Buffer.concat([Buffer.from([3]), Buffer.from(JSON.stringify({ metadata: {}, ...body }))]));
    ws.close();
  };
  let exec: Docker.Exec;
  try {
    exec = await docker.getContainer(containerId).exec({
      Cmd: command,
      AttachStdin: stdin,
      AttachStdout: true,
      AttachStderr: true,
    });
  } catch (err) {
    status({ status: 'Failure', message: (err as Error).message, reason: 'InternalError', code: 500 });
    return;
  }
  const stream = await exec.start({ hijack: true, stdin });
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  let output = '';
  stdout.on('data', (chunk: Buffer) => {
    if (output.length < 4096) output += chunk.toString('utf8');
    ws.send(Buffer.concat([Buffer.from([1]), chunk]));
  });
  stderr.on('data', (chunk: Buffer) => ws.send(Buffer.concat([Buffer.from([2]), chunk])));
  docker.modem.demuxStream(stream, stdout, stderr);
  session.input = (data: Buffer) => {
    if (data[0] === 0 && stdin) stream.write(data.subarray(1));
    else if (data[0] === 255 && data[1] === 0) stream.end();
  };
  for (const data of pending.splice(0)) session.input(data);
  ws.on('close', () => stream.destroy());
  await new Promise<void>((resolve) => {
    stream.once('end', resolve);
    stream.once('close', resolve);
    stream.once('error', () => resolve());
  });
  if (ws.readyState !== ws.OPEN) return;
  let inspected = await exec.inspect();
  for (let attempt = 0; inspected.Running && attempt < 50; attempt++) {
    await new Promise((resolve) => setTimeout(resolve, 20));
    inspected = await exec.inspect();
  }
  const exitCode = inspected.ExitCode ?? -1;
  if (exitCode === 0) {
    status({ status: 'Success' });
    return;
  }
  // The runtime could not start the command: a real kubelet reports a Failure without NonZeroExitCode.
  const startFailure = /OCI runtime exec failed: .*/.exec(output);
  if ((exitCode === 126 || exitCode === 127) && startFailure) {
    status({ status: 'Failure', message: startFailure[0].trim(), reason: 'InternalError' });
    return;
  }
  status({
    status: 'Failure',
    message: `command terminated with non-zero exit code: exit status ${exitCode}`,
    reason: 'NonZeroExitCode',
    details: { causes: [{ reason: 'ExitCode', message: `${exitCode}` }] },
  });
}

/** Kubernetes' equality-based selectors: `a=b`, `a==b`, `a!=b`, `a` (exists), comma-separated. */
function selects(selector: string | null, values: Record<string, string>): boolean {
  if (!selector) return true;
  return selector.split(',').every((term) => {
    const [, name, op, value] = /^\s*([^=!\s]+)\s*(==|=|!=)?\s*(.*?)\s*$/.exec(term) ?? [];
    if (!name) return true;
    if (!op) return name in values;
    return op === '!=' ? values[name] !== value : values[name] === value;
  });
}

function readBody(request: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.once('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    request.once('error', reject);
  });
}

function sendJson(response: ServerResponse, code: number, body: unknown): void {
  response.writeHead(code, { 'Content-Type': 'application/json' });
  response.end(JSON.stringify(body));
}

function sendPods(response: ServerResponse, items: V1Pod[]): void {
  sendJson(response, 200, { kind: 'PodList', apiVersion: 'v1', metadata: { resourceVersion: '1' }, items });
}

function sendStatus(response: ServerResponse, code: number, reason: string, message: string): void {
  sendJson(response, code, { kind: 'Status', apiVersion: 'v1', status: 'Failure', message, reason, code });
}
