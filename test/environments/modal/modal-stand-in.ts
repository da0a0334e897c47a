/**
 * A stand-in of Modal's API, not Modal: a gRPC server speaking the part of Modal's protocol (modal-stand-in/proto.ts)
 * that the unmodified `modal` SDK calls for what Rollout does (apps, images from Dockerfile commands, V2 sandboxes,
 * execs through the task command router, filesystem snapshots, network access), pointed at by the SDK's own
 * MODAL_SERVER_URL. Its sandboxes are containers of the local Docker engine and its images local builds, labelled
 * with this instance's id so that stop() removes exactly what it made. The real service is tested by
 * `npm run test:cloud` when credentials are set.
 */
import { randomBytes } from 'node:crypto';

import type { sendUnaryData, ServerUnaryCall, ServerWritableStream } from '@grpc/grpc-js';
import type { Metadata } from '@grpc/grpc-js';
import { Server, ServerCredentials, status } from '@grpc/grpc-js';
import Docker from 'dockerode';

import type { CloudStandIn } from '../../support/cloud-stand-in';
import { StandInExecs } from './modal-stand-in/execs';
import { StandInImages } from './modal-stand-in/images';
import type { Message } from './modal-stand-in/proto';
import { grpcError, serviceDefinition, throttleError } from './modal-stand-in/proto';
import { checkGpu, checkTags } from './modal-stand-in/rules';
import { DEFAULT_ENVIRONMENT, StandInSandboxes } from './modal-stand-in/sandboxes';
import { StandInFaults } from '../../support/stand-in-faults';

/** On every container and image the stand-in makes: the instance's id. */
export const MODAL_STAND_IN_LABEL = 'rollout.modal-stand-in';
/** The reply Modal gives when a workspace is at its sandbox limit: gRPC RESOURCE_EXHAUSTED. */
export const MODAL_QUOTA_MESSAGE = 'Workspace sandbox limit reached: too many concurrent Sandboxes (stand-in quota)';
/** How long the stand-in's throttle reply asks the SDK to wait before calling again. */
const THROTTLE_RETRY_AFTER_SECS = 0.2;
/** The credentials the stand-in accepts (any non-empty pair: the SDK sends them on every call). */
const TOKEN_ID = 'ak-stand-in';
const TOKEN_SECRET = 'as-stand-in';

type Unary = (request: Message, call: ServerUnaryCall<Message, Message>) => Promise<Message> | Message;

/** A handler that answers with the function's result, or with its error's gRPC status (INTERNAL when it has none). */
function unary(handler: Unary) {
  return (call: ServerUnaryCall<Message, Message>, callback: sendUnaryData<Message>) => {
    Promise.resolve()
      .then(() => handler(call.request, call))
      .then(
        (reply) => callback(null, reply),
        (err: Error & { code?: number; metadata?: Metadata }) =>
          callback({ code: err.code ?? status.INTERNAL, details: err.message, metadata: err.metadata })
      );
  };
}

/** A fake JWT whose payload carries an expiry an hour on (the SDK reads `exp` to know when to refresh). */
function jwt(): string {
  const part = (value: object) => Buffer.from(JSON.stringify(value)).toString('base64url');
  return `${part({ alg: 'none' })}.${part({ exp: Math.floor(Date.now() / 1000) + 3600 })}.stand-in`;
}

export class ModalStandIn implements CloudStandIn {
  readonly vendor = 'modal' as const;
  readonly instance = randomBytes(4).toString('hex');
  private readonly server = new Server();
  private readonly docker = new Docker();
  private readonly label = { [MODAL_STAND_IN_LABEL]: this.instance };
  private readonly repository = `rollout-modal-stand-in-${this.instance}`;
  private readonly imageStore = new StandInImages(this.docker, this.repository, this.label);
  private readonly boxes = new StandInSandboxes(this.docker, this.imageStore, this.label);
  private readonly execs = new StandInExecs(this.docker);
  /** App id per `<environment>/<name>`, and each App's Environment. */
  private readonly apps = new Map<string, string>();
  private readonly appEnvironments = new Map<string, string>();
  /** The workspace's Environments (`modal environment create` adds one: addEnvironment). */
  private readonly environments = new Set([DEFAULT_ENVIRONMENT]);
  /** Ephemeral secrets (SecretGetOrCreate), as KEY=value lines: how the V1 path carries a sandbox's env. */
  private readonly secrets = new Map<string, string[]>();
  private readonly faults = new StandInFaults();
  private quotaFailures = 0;
  private port = 0;
  /** Calls per method, for tests that check what the SDK asked. */
  readonly calls = new Map<string, number>();

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  get env(): Record<string, string> {
    return { MODAL_SERVER_URL: this.url, MODAL_TOKEN_ID: TOKEN_ID, MODAL_TOKEN_SECRET: TOKEN_SECRET };
  }

  /** A Modal Environment of the workspace besides "main" (as `modal environment create <name>` makes one). */
  addEnvironment(name: string): void {
    this.environments.add(name);
  }

  failNextCreates(count: number): void {
    this.quotaFailures = count;
  }

  setFaults(faults: { rate: number }): void {
    this.faults.set(faults);
  }

  /**
   * A throttled control-plane call: RESOURCE_EXHAUSTED with Modal's retry policy (see throttleError), which the SDK
   * waits out by itself; the wording and delay are the stand-in's (docs/modal.md, to confirm).
   */
  private throttle(): void {
    if (this.faults.hit()) throw throttleError('Rate limit exceeded (stand-in fault)', THROTTLE_RETRY_AFTER_SECS);
  }

  /**
   * A failed call of the task command router. The SDK's router client reads no retry policy: it calls again on the
   * transient codes only (`RETRYABLE_GRPC_STATUS_CODES`: DEADLINE_EXCEEDED, UNAVAILABLE, CANCELLED, INTERNAL,
   * UNKNOWN), so the stand-in's router faults are UNAVAILABLE; how Modal's router sheds load is to confirm.
   */
  private routerFault(): void {
    if (this.faults.hit()) throw grpcError(status.UNAVAILABLE, 'Router unavailable (stand-in fault)');
  }

  async sandboxes(): Promise<string[]> {
    const running = [];
    for (const record of this.boxes.byId.values()) if (await this.boxes.running(record)) running.push(record.id);
    return running;
  }

  /** How many images it holds (built, or snapshots). */
  images(): number {
    return this.imageStore.count();
  }

  /** The local Docker tag of a Modal image id the stand-in built (tests look into it). */
  localImage(imageId: string): string | null {
    return this.imageStore.localTag(imageId);
  }

  async start(port = 0): Promise<this> {
    this.server.addService(serviceDefinition('modal.client.ModalClient'), this.control());
    this.server.addService(serviceDefinition('modal.task_command_router.TaskCommandRouter'), this.router());
    this.port = await new Promise<number>((resolve, reject) =>
      this.server.bindAsync(`127.0.0.1:${port}`, ServerCredentials.createInsecure(), (err, bound) =>
        err ? reject(err) : resolve(bound)
      )
    );
    return this;
  }

  async stop(): Promise<void> {
    this.server.forceShutdown();
    await this.boxes.removeAll();
    await this.imageStore.removeAll();
  }

  /** An Environment of the workspace by name ('' is the default one), or NOT_FOUND. */
  private environment(name: string): string {
    const environment = name || DEFAULT_ENVIRONMENT;
    if (!this.environments.has(environment)) {
      throw grpcError(status.NOT_FOUND, `Environment '${environment}' not found`);
    }
    return environment;
  }

  /** A sandbox of either path, after Modal's checks of its tags and GPUs, in its App's Environment. */
  private async createSandbox(request: Message, version: 'V1' | 'V2') {
    if (this.quotaFailures > 0) {
      this.quotaFailures--;
      throw grpcError(status.RESOURCE_EXHAUSTED, MODAL_QUOTA_MESSAGE);
    }
    checkTags(request.tags as Message[]);
    const definition = request.definition as Message;
    checkGpu(definition, version);
    const secretEnv = ((definition.secretIds as string[] | undefined) ?? []).flatMap((id) => {
      const env = this.secrets.get(id);
      if (!env) throw grpcError(status.NOT_FOUND, `Secret ${id} not found`);
      return env;
    });
    const environment = this.appEnvironments.get(request.appId as string);
    if (!environment) throw grpcError(status.NOT_FOUND, `App ${String(request.appId)} not found`);
    return this.boxes.create(request, { version, environment, secretEnv });
  }

  /** SandboxTagsSet(V2): the sandbox's tags replaced, within Modal's tag rule. */
  private setTags(request: Message): Message {
    checkTags(request.tags as Message[]);
    this.boxes.get(request.sandboxId as string).tags = request.tags as Message[];
    return {};
  }

  /** SandboxGetTaskId(V2): the task of a running sandbox, or the result of one that has ended. */
  private taskOf(sandboxId: string): Message {
    const record = this.boxes.get(sandboxId);
    return record.result ? { taskResult: record.result } : { taskId: record.taskId };
  }

  requests(): number {
    let total = 0;
    for (const calls of this.calls.values()) total += calls;
    return total;
  }

  private count(method: string): void {
    this.calls.set(method, (this.calls.get(method) ?? 0) + 1);
  }

  /** Every call must carry the token pair, as Modal's API checks (the SDK sends it as metadata). */
  private authorize(call: { metadata: { get(key: string): (string | Buffer)[] } }): void {
    if (call.metadata.get('x-modal-token-id')[0]?.toString() !== TOKEN_ID) {
      throw grpcError(status.UNAUTHENTICATED, 'Token ID is malformed or not found');
    }
  }

  private control() {
    const handle = (name: string, handler: Unary) =>
      unary((request, call) => {
        this.count(name);
        this.authorize(call);
        this.throttle();
        return handler(request, call);
      });
    return {
      AuthTokenGet: handle('AuthTokenGet', () => ({ token: jwt() })),
      AppGetOrCreate: handle('AppGetOrCreate', (request) => {
        const environment = this.environment(request.environmentName as string);
        const key = `${environment}/${request.appName as string}`;
        if (!this.apps.has(key)) {
          if (request.objectCreationType !== 1)
            throw grpcError(status.NOT_FOUND, `App '${String(request.appName)}' not found`);
          const appId = `ap-${randomBytes(11).toString('hex')}`;
          this.apps.set(key, appId);
          this.appEnvironments.set(appId, environment);
        }
        return { appId: this.apps.get(key)! };
      }),
      EnvironmentGetOrCreate: handle('EnvironmentGetOrCreate', (request) => ({
        environmentId: 'en-stand-in',
        metadata: { name: request.deploymentName || 'main', settings: { imageBuilderVersion: '2025.06' } },
      })),
      EnvironmentList: handle('EnvironmentList', () => ({
        items: [...this.environments].map((name) => ({
          name,
          environmentId: `en-${name}`,
          default: name === DEFAULT_ENVIRONMENT,
        })),
      })),
      SecretGetOrCreate: handle('SecretGetOrCreate', (request) => {
        if (request.objectCreationType !== 5)
          throw grpcError(status.UNIMPLEMENTED, 'only ephemeral secrets (stand-in)');
        const secretId = `st-${randomBytes(11).toString('hex')}`;
        const env = Object.entries(request.envDict as Record<string, string>).map(([key, value]) => `${key}=${value}`);
        this.secrets.set(secretId, env);
        return { secretId };
      }),
      ImageGetOrCreate: handle('ImageGetOrCreate', (request) => this.imageStore.getOrCreate(request)),
      ImageJoinStreaming: async (call: ServerWritableStream<Message, Message>) => {
        this.count('ImageJoinStreaming');
        const replies = await this.imageStore.join(call.request.imageId as string, Number(call.request.timeout) || 55);
        for (const reply of replies) call.write(reply);
        call.end();
      },
      ImageFromId: handle('ImageFromId', (request) => {
        if (!this.imageStore.localTag(request.imageId as string)) {
          throw grpcError(status.NOT_FOUND, `Could not find image with ID ${String(request.imageId)}`);
        }
        return { imageId: request.imageId };
      }),
      ImagePublish: handle('ImagePublish', (request) => this.imageStore.publish(request)),
      ImageGetByTag: handle('ImageGetByTag', (request) => this.imageStore.byTag(request)),
      ImageDelete: handle('ImageDelete', async (request) => {
        if (!(await this.imageStore.delete(request.imageId as string))) {
          throw grpcError(status.NOT_FOUND, `Could not find image with ID ${String(request.imageId)}`);
        }
        return {};
      }),
      SandboxCreateV2: handle('SandboxCreateV2', async (request) => {
        const record = await this.createSandbox(request, 'V2');
        return {
          sandboxId: record.id,
          taskId: record.taskId,
          commandRouterAccess: { jwt: jwt(), url: `https://127.0.0.1:${this.port}` },
        };
      }),
      // The V1 path, which the SDK takes for GPU sandboxes: create, then poll SandboxGetTaskId until scheduled.
      SandboxCreate: handle('SandboxCreate', async (request) => ({
        sandboxId: (await this.createSandbox(request, 'V1')).id,
      })),
      SandboxGetTaskId: handle('SandboxGetTaskId', (request) => this.taskOf(request.sandboxId as string)),
      SandboxGetTaskIdV2: handle('SandboxGetTaskIdV2', (request) => this.taskOf(request.sandboxId as string)),
      TaskGetCommandRouterAccess: handle('TaskGetCommandRouterAccess', (request) => {
        this.boxes.byTask(request.taskId as string);
        return { jwt: jwt(), url: `https://127.0.0.1:${this.port}` };
      }),
      SandboxGetCommandRouterAccess: handle('SandboxGetCommandRouterAccess', (request) => {
        this.boxes.get(request.sandboxId as string);
        return { jwt: jwt(), url: `https://127.0.0.1:${this.port}` };
      }),
      SandboxListV2: handle('SandboxListV2', (request) => ({ sandboxes: this.boxes.list(request).slice(0, 100) })),
      SandboxTerminateV2: handle('SandboxTerminateV2', (request) => this.boxes.terminate(request.sandboxId as string)),
      SandboxTerminate: handle('SandboxTerminate', (request) => this.boxes.terminate(request.sandboxId as string)),
      SandboxWaitV2: handle('SandboxWaitV2', (request) =>
        this.boxes.wait(request.sandboxId as string, Number(request.timeout) || 0)
      ),
      SandboxWait: handle('SandboxWait', (request) =>
        this.boxes.wait(request.sandboxId as string, Number(request.timeout) || 0)
      ),
      SandboxTagsGetV2: handle('SandboxTagsGetV2', (request) => ({
        tags: this.boxes.get(request.sandboxId as string).tags,
      })),
      SandboxTagsGet: handle('SandboxTagsGet', (request) => ({
        tags: this.boxes.get(request.sandboxId as string).tags,
      })),
      SandboxTagsSet: handle('SandboxTagsSet', (request) => this.setTags(request)),
      SandboxTagsSetV2: handle('SandboxTagsSetV2', (request) => this.setTags(request)),
    };
  }

  private router() {
    const handle = (name: string, handler: Unary) =>
      unary((request, call) => {
        this.count(name);
        if (!call.metadata.get('authorization')[0]?.toString().startsWith('Bearer ')) {
          throw grpcError(status.UNAUTHENTICATED, 'missing the command router JWT');
        }
        this.routerFault();
        return handler(request, call);
      });
    const running = (taskId: string) => {
      const record = this.boxes.byTask(taskId);
      if (record.result) throw grpcError(status.FAILED_PRECONDITION, `Sandbox ${record.id} has finished`);
      return record;
    };
    return {
      TaskExecStart: handle('TaskExecStart', async (request) => {
        await this.execs.start(running(request.taskId as string).containerId, request);
        return {};
      }),
      TaskExecStdioRead: async (call: ServerWritableStream<Message, Message>) => {
        this.count('TaskExecStdioRead');
        let cancelled = false;
        call.on('cancelled', () => (cancelled = true));
        try {
          await this.execs.read(
            call.request,
            (data) => call.write({ data }),
            () => cancelled
          );
          call.end();
        } catch (err) {
          call.destroy(Object.assign(err as Error, { code: status.NOT_FOUND }));
        }
      },
      TaskExecStdinWrite: handle('TaskExecStdinWrite', (request) => {
        this.execs.stdinWrite(request);
        return {};
      }),
      TaskExecWait: handle('TaskExecWait', (request, call) => {
        let cancelled = false;
        call.on('cancelled', () => (cancelled = true));
        return this.execs.wait(request.execId as string, () => cancelled);
      }),
      TaskExecPoll: handle('TaskExecPoll', (request) => this.execs.poll(request.execId as string)),
      TaskSnapshotFilesystem: handle('TaskSnapshotFilesystem', async (request) => {
        const record = running(request.taskId as string);
        const imageId = `im-${randomBytes(12).toString('hex')}`;
        this.imageStore.register(imageId, await this.boxes.snapshot(record, this.repository, imageId));
        return { imageId };
      }),
      TaskSetNetworkAccess: handle('TaskSetNetworkAccess', async (request) => {
        await this.boxes.setNetwork(running(request.taskId as string), request.networkAccess as Message);
        return {};
      }),
    };
  }
}

/** A stand-in listening on a free port of 127.0.0.1 (or the one given). */
export function startModalStandIn(port?: number): Promise<ModalStandIn> {
  return new ModalStandIn().start(port);
}
