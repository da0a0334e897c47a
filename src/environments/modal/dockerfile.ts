/**
 * A task's environment/Dockerfile as Modal builds images through its JS SDK: a base image (the FROM line's, pulled by
 * Modal) and the Dockerfile commands after it. Modal's builder has no build context from the JS SDK, so each COPY
 * (or ADD) of the task's own files becomes RUN lines that write those files, as a gzipped tar in base64 pieces, and
 * unpack them where COPY would have put them: the same content gives the same commands, so Modal's layer cache builds
 * an environment once per account. Single-stage Dockerfiles only (the JS SDK builds one stage).
 */
import { lstat, readFile, readdir } from 'node:fs/promises';
import path from 'node:path';
import { gzipSync } from 'node:zlib';

import { minimatch } from 'minimatch';
import tarStream from 'tar-stream';

import { shellQuote } from '../../shell';
import { TaskEnvironmentError } from '../../contracts/environment';
import { ifPresent } from '../../files/absent';

/**
 * Base64 per physical line: Dockerfile parsers refuse a line of 64 KiB or more (BuildKit frontend/dockerfile/parser/
 * parser.go:565-572, "dockerfile line greater than max allowed size of 65535"; Modal builds from Dockerfile
 * commands).
 */
const PIECE = 48 * 1024;
/**
 * Pieces per RUN, each on a line of its own (joined by continuations): the RUN's command is one shell argument,
 * under Linux's 128 KiB per argument; fewer RUNs keep the layer count down.
 */
const PIECES_PER_RUN = 2;
/** The most context (gzipped) a Dockerfile's COPY lines may carry: every piece is a layer of the image. */
export const MAX_COPIED_BYTES = 4 * 1024 * 1024;
/** Every archived file's time: the same content must give the same commands (Modal's layer cache key). */
const EPOCH = new Date(0);

export interface ModalImageRecipe {
  baseImage: string;
  commands: string[];
}

interface Instruction {
  keyword: string;
  /** The instruction's text after its keyword (continuations joined, heredoc bodies kept). */
  rest: string;
  line: string;
}

export async function modalImageRecipe(contextDir: string): Promise<ModalImageRecipe> {
  const file = path.join(contextDir, 'Dockerfile');
  const instructions = parseInstructions(await readFile(file, 'utf8'));
  const froms = instructions.filter((instruction) => instruction.keyword === 'FROM');
  if (froms.length !== 1) {
    throw new TaskEnvironmentError(
      'EnvironmentBuildError',
      `${file}: ${froms.length ? 'a multi-stage Dockerfile' : 'no FROM line'}: the modal environment builds ` +
        'single-stage Dockerfiles (or set environment.docker_image in task.toml)'
    );
  }
  const fromIndex = instructions.indexOf(froms[0]!);
  const args = argDefaults(instructions.slice(0, fromIndex));
  const words = froms[0]!.rest.split(/\s+/).filter((word) => !word.startsWith('--'));
  const baseImage = substitute(words[0] ?? '', args);
  const commands: string[] = [];
  let copies = 0;
  let copiedBytes = 0;
  for (const instruction of instructions.slice(fromIndex + 1)) {
    const copy = instruction.keyword === 'COPY' || instruction.keyword === 'ADD' ? localCopy(instruction) : null;
    if (!copy) {
      commands.push(instruction.line);
      continue;
    }
    const packed = await packSources(contextDir, copy, file);
    copiedBytes += packed.archive.length;
    if (copiedBytes > MAX_COPIED_BYTES) {
      throw new TaskEnvironmentError(
        'EnvironmentBuildError',
        `${file}: COPY lines carry more than ${MAX_COPIED_BYTES / 1024 / 1024} MiB (gzipped) of environment/, more ` +
          'than the modal environment inlines into an image: set environment.docker_image in task.toml to a prebuilt image'
      );
    }
    commands.push(...unpackCommands(packed, copy, `/tmp/rollout-copy-${copies++}`));
  }
  return { baseImage, commands };
}

/** Dockerfile instructions: comments and blank lines dropped, `\` continuations joined, heredoc bodies kept. */
function parseInstructions(text: string): Instruction[] {
  const lines = text.split(/\r?\n/);
  const instructions: Instruction[] = [];
  for (let i = 0; i < lines.length; i++) {
    let line = lines[i]!;
    if (/^\s*(#|$)/.test(line)) continue;
    while (/\\\s*$/.test(line) && i + 1 < lines.length) {
      const next = lines[++i]!;
      if (/^\s*#/.test(next)) continue;
      line = `${line}\n${next}`;
    }
    for (const [, terminator] of line.matchAll(/<<-?["']?([A-Za-z_][A-Za-z0-9_]*)["']?/g)) {
      const body: string[] = [];
      while (i + 1 < lines.length) {
        const next = lines[++i]!;
        body.push(next);
        if (next.trim() === terminator) break;
      }
      line = [line, ...body].join('\n');
    }
    const match = /^\s*([A-Za-z]+)\s*([\s\S]*)$/.exec(line);
    if (!match) continue;
    // The line goes to Modal as it is (continuations kept); its words are read with them joined.
    const rest = match[2]!.replace(/\\\s*\n/g, ' ').trim();
    instructions.push({ keyword: match[1]!.toUpperCase(), rest, line: line.trim() });
  }
  return instructions;
}

function argDefaults(instructions: Instruction[]): Map<string, string> {
  const args = new Map<string, string>();
  for (const { keyword, rest } of instructions) {
    const match = keyword === 'ARG' ? /^([A-Za-z_][A-Za-z0-9_]*)(?:=(.*))?$/.exec(rest) : null;
    if (match) args.set(match[1]!, (match[2] ?? '').replace(/^["']|["']$/g, ''));
  }
  return args;
}

function substitute(text: string, args: Map<string, string>): string {
  return text.replace(
    /\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)/g,
    (_, a, fallback, b) => {
      const value = args.get((a ?? b) as string);
      return value || (fallback as string | undefined) || '';
    }
  );
}

interface LocalCopy {
  sources: string[];
  dest: string;
  chown?: string;
  chmod?: string;
}

/** A COPY or ADD of the task's own files (not `--from`, not an ADD of a URL), with its sources, dest and flags. */
function localCopy({ keyword, rest }: Instruction): LocalCopy | null {
  const flags = new Map<string, string>();
  let body = rest;
  for (let flag = /^--([a-z-]+)(?:=(\S*))?\s+/.exec(body); flag; flag = /^--([a-z-]+)(?:=(\S*))?\s+/.exec(body)) {
    flags.set(flag[1]!, flag[2] ?? '');
    body = body.slice(flag[0].length);
  }
  if (flags.has('from')) return null;
  const words = body.startsWith('[') ? (JSON.parse(body) as string[]) : body.split(/\s+/).filter(Boolean);
  if (words.length < 2) return null;
  const sources = words.slice(0, -1);
  if (keyword === 'ADD' && sources.some((source) => /^(https?|git):\/\/|^git@/.test(source))) return null;
  return { sources, dest: words[words.length - 1]!, chown: flags.get('chown'), chmod: flags.get('chmod') };
}

/** What a COPY puts in place: a gzipped tar, the folder to unpack it in, and the paths it makes there. */
interface PackedCopy {
  archive: Buffer;
  dir: string;
  names: string[];
}

/**
 * The sources of a COPY as Docker copies them: a folder's contents into the destination, files by name; a lone
 * file copied to a name without a trailing `/` under that name.
 */
async function packSources(contextDir: string, copy: LocalCopy, file: string): Promise<PackedCopy> {
  const pack = tarStream.pack();
  const chunks: Buffer[] = [];
  pack.on('data', (chunk: unknown) => chunks.push(chunk as Buffer));
  const ended = new Promise<void>((resolve, reject) => pack.on('end', () => resolve()).on('error', reject));
  const matched = (await Promise.all(copy.sources.map((source) => expand(contextDir, source)))).flat();
  if (!matched.length) {
    throw new TaskEnvironmentError('EnvironmentBuildError', `${file}: COPY ${copy.sources.join(' ')}: no such file`);
  }
  let dir = copy.dest;
  const names: string[] = [];
  for (const source of matched) {
    const full = path.join(contextDir, source);
    const info = await lstat(full);
    if (info.isDirectory()) names.push(...(await packTree(pack, full, '')));
    else if (info.isFile()) {
      let name = path.posix.basename(source);
      if (matched.length === 1 && !copy.dest.endsWith('/')) {
        [dir, name] = [path.posix.dirname(copy.dest), path.posix.basename(copy.dest)];
      }
      pack.entry({ name, mode: info.mode & 0o7777, mtime: EPOCH }, await readFile(full));
      names.push(name);
    }
  }
  pack.finalize();
  await ended;
  return { archive: gzipSync(Buffer.concat(chunks)), dir, names };
}

/** A source path of the context, with `*`-style patterns matched against the context's files. */
async function expand(contextDir: string, source: string): Promise<string[]> {
  const relative = path.posix.normalize(source).replace(/^(\.\/|\/)+/, '') || '.';
  if (relative.startsWith('..')) return [];
  if (!/[*?[]/.test(relative)) {
    return (await lstat(path.join(contextDir, relative)).then(
      () => true,
      () => false
    ))
      ? [relative]
      : [];
  }
  const dir = path.posix.dirname(relative);
  const names = (await ifPresent(readdir(path.join(contextDir, dir)))) ?? [];
  return names.map((name) => path.posix.join(dir, name)).filter((name) => minimatch(name, relative, { dot: true }));
}

/** Packs a folder's tree; returns the names of its top level. */
async function packTree(pack: tarStream.Pack, root: string, relative: string): Promise<string[]> {
  const names: string[] = [];
  for (const entry of await readdir(path.join(root, relative), { withFileTypes: true })) {
    const name = path.posix.join(relative, entry.name);
    const info = await lstat(path.join(root, name));
    if (entry.isDirectory()) {
      pack.entry({ name, type: 'directory', mode: info.mode & 0o7777, mtime: EPOCH });
      await packTree(pack, root, name);
    } else if (entry.isFile()) {
      pack.entry({ name, mode: info.mode & 0o7777, mtime: EPOCH }, await readFile(path.join(root, name)));
    } else continue;
    names.push(name);
  }
  return names;
}

/** RUN lines that write the archive in pieces, then unpack it where the COPY puts files (relative to WORKDIR). */
function unpackCommands({ archive, dir, names }: PackedCopy, copy: LocalCopy, scratch: string): string[] {
  const text = archive.toString('base64');
  const commands: string[] = [];
  for (let at = 0; at < text.length; at += PIECE * PIECES_PER_RUN) {
    const writes: string[] = [];
    for (let piece = at; piece < Math.min(text.length, at + PIECE * PIECES_PER_RUN); piece += PIECE) {
      writes.push(`printf '%s' '${text.slice(piece, piece + PIECE)}' >> ${scratch}`);
    }
    commands.push(`RUN ${writes.join(' \\\n && ')}`);
  }
  const paths = names.map((name) => shellQuote(path.posix.join(dir, name))).join(' ');
  const target = shellQuote(dir);
  commands.push(
    [
      `RUN mkdir -p ${target}`,
      `base64 -d ${scratch} | tar -xzf - -C ${target}`,
      ...(copy.chown && names.length ? [`chown -R ${shellQuote(copy.chown)} ${paths}`] : []),
      ...(copy.chmod && names.length ? [`chmod -R ${shellQuote(copy.chmod)} ${paths}`] : []),
      `rm -f ${scratch}`,
    ].join(' && ')
  );
  return commands;
}
