/**
 * The stand-in's templates: E2B's template build API (POST /v3/templates, the COPY files' upload links, POST
 * /v2/templates/{id}/builds/{build}, its status and logs, aliases, tags, DELETE /templates/{id}), each build a local
 * `docker build` of the steps the SDK sends (translated back to a Dockerfile over E2B's provisioning: a `user` user).
 */
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';

import { docker, dockerOk } from './docker-cli';

export interface BuildStep {
  type: string;
  args: string[];
  filesHash?: string;
}

export interface TemplateBody {
  fromImage?: string;
  fromTemplate?: string;
  steps?: BuildStep[];
  startCmd?: string;
}

interface LogEntry {
  timestamp: string;
  level: 'info' | 'error';
  message: string;
}

interface BuildRecord {
  buildID: string;
  status: 'waiting' | 'building' | 'ready' | 'error';
  logs: LogEntry[];
  reason?: { message: string; step?: string };
  image: string;
  /** Tags that point at it once it is ready (E2B moves a tag only to a build that succeeded). */
  tags: string[];
}

export interface TemplateRecord {
  templateID: string;
  name: string;
  cpuCount: number;
  memoryMB: number;
  /** Tag → build id. */
  tags: Map<string, string>;
  builds: Map<string, BuildRecord>;
  /** The user and start command of its last ready build (sandboxes run as that user; the command in background). */
  user: string;
  startCmd?: string;
  /** Made by POST /sandboxes/{id}/snapshots. */
  snapshot?: boolean;
}

/** E2B's defaults for a template that names no resources. */
const DEFAULT_CPUS = 2;
const DEFAULT_MEMORY_MB = 512;

export class Templates {
  readonly byId = new Map<string, TemplateRecord>();
  /** COPY sources uploaded (tar.gz), by the SDK's files hash. */
  private readonly uploads = new Map<string, Buffer>();

  constructor(private readonly label: string) {}

  find(idOrName: string): TemplateRecord | undefined {
    const name = idOrName.split(':')[0]!;
    return this.byId.get(name) ?? [...this.byId.values()].find((t) => t.name === name);
  }

  /** The image of a template's build (the default tag's, or the one named after ':'). */
  readyImage(idOrName: string): { template: TemplateRecord; image: string } | undefined {
    const template = this.find(idOrName);
    if (!template) return undefined;
    const build = template.builds.get(template.tags.get(idOrName.split(':')[1] ?? 'default') ?? '');
    return build?.status === 'ready' ? { template, image: build.image } : undefined;
  }

  request(body: { name: string; tags?: string[]; cpuCount?: number; memoryMB?: number }): unknown {
    const [name, tag] = body.name.split(':') as [string, string | undefined];
    let template = this.find(name);
    if (!template) {
      template = {
        templateID: `tpl${randomUUID().replace(/-/g, '').slice(0, 17)}`,
        name,
        cpuCount: body.cpuCount ?? DEFAULT_CPUS,
        memoryMB: body.memoryMB ?? DEFAULT_MEMORY_MB,
        tags: new Map(),
        builds: new Map(),
        user: 'user',
      };
      this.byId.set(template.templateID, template);
    }
    if (body.cpuCount) template.cpuCount = body.cpuCount;
    if (body.memoryMB) template.memoryMB = body.memoryMB;
    const buildID = randomUUID();
    const image = `e2b-stand-in-${this.label}/${template.templateID}:${buildID.slice(0, 8)}`;
    const tags = body.tags?.length ? body.tags : [tag ?? 'default'];
    template.builds.set(buildID, { buildID, status: 'waiting', logs: [], image, tags });
    return { templateID: template.templateID, buildID, public: false, names: [name], aliases: [name], tags };
  }

  /**
   * A snapshot of a sandbox (E2B keeps its filesystem and memory; the stand-in its filesystem, `docker commit`): a
   * template of its own, ready at once, marked as a snapshot for GET /snapshots.
   */
  async snapshot(from: TemplateRecord, containerId: string, name: string | undefined): Promise<TemplateRecord> {
    const templateID = `snp${randomUUID().replace(/-/g, '').slice(0, 17)}`;
    const buildID = randomUUID();
    const image = `e2b-stand-in-${this.label}/${templateID}:${buildID.slice(0, 8)}`;
    await dockerOk(['commit', '-c', `LABEL rollout.e2b-stand-in=${this.label}`, containerId, image]);
    const template: TemplateRecord = {
      templateID,
      name: name ?? templateID,
      cpuCount: from.cpuCount,
      memoryMB: from.memoryMB,
      tags: new Map([['default', buildID]]),
      builds: new Map([[buildID, { buildID, status: 'ready', logs: [], image, tags: ['default'] }]]),
      user: from.user,
      snapshot: true,
    };
    this.byId.set(templateID, template);
    return template;
  }

  hasUpload(hash: string): boolean {
    return this.uploads.has(hash);
  }

  upload(hash: string, archive: Buffer): void {
    this.uploads.set(hash, archive);
  }

  /** Starts the build in the background; its status is polled. */
  trigger(template: TemplateRecord, buildID: string, body: TemplateBody): boolean {
    const build = template.builds.get(buildID);
    if (!build) return false;
    build.status = 'building';
    void this.build(template, build, body).catch((err: Error) => {
      build.status = 'error';
      build.reason = { message: err.message };
    });
    return true;
  }

  status(template: TemplateRecord, buildID: string, logsOffset: number): unknown {
    const build = template.builds.get(buildID);
    if (!build) return undefined;
    return {
      templateID: template.templateID,
      buildID,
      status: build.status,
      logEntries: build.logs.slice(logsOffset),
      logs: [],
      reason: build.reason,
    };
  }

  async remove(template: TemplateRecord): Promise<void> {
    this.byId.delete(template.templateID);
    for (const build of template.builds.values()) await docker(['rmi', '-f', build.image]);
  }

  /** Every template, and every image its builds left (a failed build's layers too). */
  async removeAll(): Promise<void> {
    for (const template of [...this.byId.values()]) await this.remove(template);
    const left = await docker(['images', '-q', '--filter', `label=rollout.e2b-stand-in=${this.label}`]);
    const ids = left.stdout.toString('utf8').split('\n').filter(Boolean);
    if (ids.length) await docker(['rmi', '-f', ...ids]);
  }

  private async build(template: TemplateRecord, build: BuildRecord, body: TemplateBody): Promise<void> {
    const log = (message: string, level: LogEntry['level'] = 'info') =>
      build.logs.push({ timestamp: new Date().toISOString(), level, message });
    const base = body.fromTemplate ? this.readyImage(body.fromTemplate)?.image : body.fromImage;
    if (!base) throw new Error(`base template ${body.fromTemplate} not found`);
    const context = await mkdtemp(path.join(tmpdir(), 'e2b-stand-in-build-'));
    try {
      const lines = [`FROM ${base}`, 'USER root'];
      // E2B's provisioning of an image: its default user, `user`, with a home.
      if (!body.fromTemplate) lines.push('RUN id -u user >/dev/null 2>&1 || useradd -m user || adduser -D user');
      let user = 'root';
      for (const step of body.steps ?? []) {
        const args = step.args;
        if (step.type === 'RUN') {
          const runAs = args[1] || user;
          lines.push(`USER ${runAs}`, `RUN ${JSON.stringify(['/bin/sh', '-c', args[0] ?? ''])}`, `USER ${user}`);
        } else if (step.type === 'COPY') {
          const hash = step.filesHash ?? '';
          const archive = this.uploads.get(hash);
          if (!archive) throw new Error(`COPY ${args[0]}: files ${hash} were never uploaded`);
          await mkdir(path.join(context, hash), { recursive: true });
          await extractUpload(archive, path.join(context, hash));
          const chown = args[2] ? `--chown=${args[2]} ` : '';
          lines.push(`COPY ${chown}${JSON.stringify([`${hash}/${args[0]}`, args[1]])}`);
        } else if (step.type === 'WORKDIR') lines.push(`WORKDIR ${args[0]}`);
        else if (step.type === 'USER') {
          user = args[0] ?? 'root';
          lines.push(`USER ${user}`);
        } else if (step.type === 'ENV') {
          for (let i = 0; i + 1 < args.length; i += 2) lines.push(`ENV ${args[i]}=${JSON.stringify(args[i + 1])}`);
        } else throw new Error(`the stand-in cannot build a ${step.type} step`);
      }
      await writeFile(path.join(context, 'Dockerfile'), lines.join('\n') + '\n');
      log(`Building ${template.name} (${body.steps?.length ?? 0} steps) from ${base}`);
      const run = await docker(['build', '--label', `rollout.e2b-stand-in=${this.label}`, '-t', build.image, context]);
      for (const line of (run.stdout.toString('utf8') + run.stderr).split('\n')) if (line.trim()) log(line);
      if (run.code !== 0) {
        const tail = run.stderr.trim().split('\n').slice(-5).join('\n');
        log(tail, 'error');
        build.status = 'error';
        build.reason = { message: `build failed: ${tail}` };
        return;
      }
      template.user = user === 'root' && !body.steps?.some((s) => s.type === 'USER') ? 'user' : user;
      template.startCmd = body.startCmd;
      for (const tag of build.tags) template.tags.set(tag, build.buildID);
      build.status = 'ready';
      log('Build finished');
    } finally {
      await rm(context, { recursive: true, force: true });
    }
  }
}

/** Extracts a gzipped tar (what the SDK uploads) into a folder, with the host's tar. */
function extractUpload(archive: Buffer, dir: string): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const child = spawn('tar', ['-xzf', '-', '-C', dir], { stdio: ['pipe', 'ignore', 'pipe'] });
    let err = '';
    child.stderr.on('data', (chunk: Buffer) => (err += chunk.toString()));
    child.on('error', reject);
    child.on('close', (code) => (code === 0 ? resolve() : reject(new Error(`tar: ${err.trim()}`))));
    child.stdin.end(archive);
  });
}
