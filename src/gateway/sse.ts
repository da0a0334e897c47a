/** Incremental Server-Sent Events parsing: the gateway reads a stream as it passes through, without holding it up. */
import { StringDecoder } from 'node:string_decoder';

export interface SseEvent {
  event: string | null;
  data: string;
}

export class SseParser {
  readonly events: SseEvent[] = [];
  private readonly decoder = new StringDecoder('utf8');
  private buffer = '';

  push(chunk: Buffer): void {
    this.buffer += this.decoder.write(chunk);
    let end: number;
    // Events end at a blank line; CRLF and LF line ends are both allowed.
    while ((end = this.buffer.search(/\r?\n\r?\n/)) >= 0) {
      const block = this.buffer.slice(0, end);
      this.buffer = this.buffer.slice(end).replace(/^\r?\n\r?\n/, '');
      this.parseBlock(block);
    }
  }

  /** Ends the stream: a last event without its blank line still counts. */
  end(): SseEvent[] {
    this.buffer += this.decoder.end();
    if (this.buffer.trim()) this.parseBlock(this.buffer);
    this.buffer = '';
    return this.events;
  }

  private parseBlock(block: string): void {
    let event: string | null = null;
    const data: string[] = [];
    for (const line of block.split(/\r?\n/)) {
      if (line.startsWith('event:')) event = line.slice(6).trim();
      else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
    }
    if (data.length > 0) this.events.push({ event, data: data.join('\n') });
  }
}

/** The JSON payloads of events, skipping sentinels such as `[DONE]`. */
export function jsonPayloads(events: SseEvent[]): Record<string, unknown>[] {
  const out: Record<string, unknown>[] = [];
  for (const event of events) {
    try {
      const value: unknown = JSON.parse(event.data);
      if (value !== null && typeof value === 'object' && !Array.isArray(value))
        out.push(value as Record<string, unknown>);
    } catch {
      // A sentinel or a keep-alive: nothing to assemble.
    }
  }
  return out;
}

/**
 * Rewrites each event's JSON `data` as a stream passes through (events are held only until their blank line); lines
 * that are not JSON data (comments, `[DONE]`, event names) pass unchanged.
 */
export class SseRewriter {
  private readonly decoder = new StringDecoder('utf8');
  private buffer = '';

  /** `rewrite` returning null drops the event (its lines and its blank line). */
  constructor(private readonly rewrite: (payload: Record<string, unknown>) => Record<string, unknown> | null) {}

  /** The complete events of the text so far, rewritten. */
  push(chunk: Buffer): string {
    this.buffer += this.decoder.write(chunk);
    let out = '';
    let end: RegExpExecArray | null;
    while ((end = /\r?\n\r?\n/.exec(this.buffer))) {
      const block = this.block(this.buffer.slice(0, end.index));
      if (block !== null) out += block + end[0];
      this.buffer = this.buffer.slice(end.index + end[0].length);
    }
    return out;
  }

  /** What is left at the end of the stream (a last event without its blank line). */
  end(): string {
    this.buffer += this.decoder.end();
    const rest = this.buffer ? this.block(this.buffer) : '';
    this.buffer = '';
    return rest ?? '';
  }

  private block(block: string): string | null {
    let dropped = false;
    const rewritten = block
      .split(/(\r?\n)/)
      .map((line) => {
        if (!line.startsWith('data:')) return line;
        const data = line.slice(5).replace(/^ /, '');
        let value: unknown;
        try {
          value = JSON.parse(data);
        } catch {
          return line;
        }
        if (value === null || typeof value !== 'object' || Array.isArray(value)) return line;
        const payload = this.rewrite(value as Record<string, unknown>);
        if (payload === null) dropped = true;
        return `data: ${JSON.stringify(payload)}`;
      })
      .join('');
    return dropped ? null : rewritten;
  }
}
