import type { Dialect, Vendor } from '../dialect';
import { anthropic } from './anthropic';
import { gemini } from './gemini';
import { openAiChat } from './openai-chat';
import { openAiCompletions } from './openai-completions';
import { openAiResponses } from './openai-responses';

export const DIALECTS: readonly Dialect[] = [openAiChat, openAiCompletions, openAiResponses, anthropic, gemini];

/** The dialect a request path (below the vendor root) speaks, among the vendor's own. */
export function dialectOf(vendor: Vendor, path: string): Dialect | null {
  return DIALECTS.find((d) => d.vendor === vendor && d.match(path) !== null) ?? null;
}

export function dialectByName(name: string): Dialect | null {
  return DIALECTS.find((d) => d.name === name) ?? null;
}
