/**
 * The stand-in's image builder: Modal builds an image layer from Dockerfile commands (`FROM <registry tag>` for the
 * first layer, `FROM base` over an earlier layer's image id after that); here each layer is a `docker build` of
 * those commands on the local engine. A layer's id is the hash of its definition, so the same commands over the same
 * base are built once and found again, as on Modal.
 */
import { createHash } from 'node:crypto';
import { EventEmitter } from 'node:events';

import type Docker from 'dockerode';
import tarStream from 'tar-stream';

import type { Message } from './proto';
import { grpcError } from './proto';

const SUCCESS = 1;
const FAILURE = 2;

interface ImageRecord {
  /** The local Docker image's tag. */
  tag: string;
  result: Message | null;
  logs: string[];
  done: EventEmitter;
}

export class StandInImages {
  private readonly images = new Map<string, ImageRecord>();
  /** Published names (`name:tag` per Modal environment) and the image each names. */
  private readonly published = new Map<string, string>();

  constructor(
    private readonly docker: Docker,
    /** The repository of every local image it makes (unique per stand-in instance, removed at stop). */
    private readonly repository: string,
    private readonly label: Record<string, string>
  ) {}

  /** The local Docker tag of a built image id, or null when there is none (or it failed). */
  localTag(imageId: string): string | null {
    const image = this.images.get(imageId);
    return image?.result?.status === SUCCESS ? image.tag : null;
  }

  /** ImageGetOrCreate: the layer's id, with its result when it is already built (else the SDK joins the build). */
  getOrCreate(request: Message): Message {
    const image = request.image as Message;
    const commands = image.dockerfileCommands as string[];
    const bases = image.baseImages as Message[];
    const id = `im-${createHash('sha256')
      .update(JSON.stringify([commands, bases.map((base) => [base.dockerTag, base.imageId])]))
      .digest('hex')
      .slice(0, 24)}`;
    const known = this.images.get(id);
    if (known && !request.forceBuild && known.result?.status !== FAILURE) {
      return { imageId: id, ...(known.result ? { result: known.result } : {}) };
    }
    const record: ImageRecord = { tag: `${this.repository}:${id}`, result: null, logs: [], done: new EventEmitter() };
    this.images.set(id, record);
    void this.build(record, commands, bases);
    return { imageId: id };
  }

  /** ImageJoinStreaming: the build's log lines, then its result once it has one (within the request's timeout). */
  async join(imageId: string, timeoutSec: number): Promise<Message[]> {
    const image = this.images.get(imageId);
    if (!image) return [{ result: { status: FAILURE, exception: `no image ${imageId}` }, eof: true }];
    if (!image.result) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, Math.max(1, timeoutSec) * 1000);
        image.done.once('done', () => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
    const logs = { taskLogs: image.logs.map((data) => ({ data })), entryId: String(image.logs.length) };
    return image.result ? [logs, { result: image.result, eof: true }] : [logs];
  }

  /** How many images are built (a failed build is none). */
  count(): number {
    return [...this.images.values()].filter((image) => image.result?.status === SUCCESS).length;
  }

  /** Registers an image the stand-in made otherwise (a filesystem snapshot), as built. */
  register(imageId: string, tag: string): void {
    this.images.set(imageId, { tag, result: { status: SUCCESS }, logs: [], done: new EventEmitter() });
  }

  /** ImagePublish: the image under a name of the environment (replacing what the name named). */
  publish(request: Message): Message {
    if (!this.localTag(request.imageId as string))
      throw grpcError(5, `Could not find image with ID ${String(request.imageId)}`);
    this.published.set(`${String(request.environmentName)}/${String(request.tag)}`, request.imageId as string);
    return { imageId: request.imageId };
  }

  /** ImageGetByTag: the image a published name names. */
  byTag(request: Message): Message {
    const imageId = this.published.get(`${String(request.environmentName)}/${String(request.tag)}`);
    if (!imageId || !this.localTag(imageId)) throw grpcError(5, `Image '${String(request.tag)}' not found`);
    return { imageId };
  }

  /** ImageDelete: the local image goes (false when there was no such image). */
  async delete(imageId: string): Promise<boolean> {
    const image = this.images.get(imageId);
    if (!image) return false;
    this.images.delete(imageId);
    await this.docker
      .getImage(image.tag)
      .remove({ force: true })
      .catch(() => undefined); // never built, or already gone
    return true;
  }

  /** Removes every local image the stand-in made. */
  async removeAll(): Promise<void> {
    for (const id of [...this.images.keys()]) await this.delete(id);
  }

  private async build(record: ImageRecord, commands: string[], bases: Message[]): Promise<void> {
    try {
      const dockerfile = commands
        .map((line) => {
          const from = /^FROM\s+(\S+)(.*)$/i.exec(line.trim());
          const base = from && bases.find((candidate) => candidate.dockerTag === from[1]);
          if (!from || !base) return line;
          const tag = this.localTag(base.imageId as string);
          if (!tag) throw new Error(`base image ${String(base.imageId)} is not built`);
          return `FROM ${tag}${from[2]}`;
        })
        .join('\n');
      // Modal builds from Dockerfile commands: a physical line of 64 KiB or more is refused as Dockerfile parsers
      // refuse it (BuildKit frontend/dockerfile/parser/parser.go:565-572), whatever the local builder would do.
      if (dockerfile.split('\n').some((line) => Buffer.byteLength(line) >= 65535)) {
        throw new Error('dockerfile line greater than max allowed size of 65535');
      }
      const context = tarStream.pack();
      context.entry({ name: 'Dockerfile' }, dockerfile);
      context.finalize();
      const stream = await this.docker.buildImage(context as unknown as NodeJS.ReadableStream, {
        t: record.tag,
        labels: this.label,
        // A failed step's container goes too.
        forcerm: true,
      });
      const failure = await new Promise<string | null>((resolve) => {
        this.docker.modem.followProgress(
          stream,
          (err, output: { error?: string }[]) =>
            resolve(err ? err.message : (output.find((o) => o.error)?.error ?? null)),
          (event: { stream?: string; error?: string }) => {
            if (event.stream) record.logs.push(event.stream);
          }
        );
      });
      record.result = failure ? { status: FAILURE, exception: failure } : { status: SUCCESS };
    } catch (err) {
      record.result = { status: FAILURE, exception: err instanceof Error ? err.message : String(err) };
    }
    record.done.emit('done');
  }
}
