/**
 * The catalogue of pre-integrated agents: one file per agent, one entry here. `oracle` and custom agents (install
 * and execute scripts in job.yaml) are not in it.
 */
import aider from './aider';
import type { BuiltinAgentDefinition } from './builtin';
import claudeCode from './claude-code';
import codex from './codex';
import geminiCli from './gemini-cli';
import miniSweAgent from './mini-swe-agent';
import opencode from './opencode';
import qwenCode from './qwen-code';
import { terminus } from './terminus';

export const BUILTIN_AGENTS: readonly BuiltinAgentDefinition[] = [
  claudeCode,
  codex,
  geminiCli,
  qwenCode,
  opencode,
  miniSweAgent,
  aider,
  terminus,
];

export function builtinAgent(name: string): BuiltinAgentDefinition | undefined {
  return BUILTIN_AGENTS.find((agent) => agent.name === name);
}

/**
 * Agents studied but not shipped, and why: none can be installed from a package registry and driven against a
 * model endpoint Rollout controls. Printed by `rollout agents list --all` and kept in docs/agents.md.
 */
export const UNSUPPORTED_AGENTS: readonly { name: string; reason: string }[] = [
  { name: 'goose', reason: 'released only as GitHub downloads (no npm or PyPI package)' },
  { name: 'cursor-cli', reason: "installed by a curl script; all inference goes to Cursor's own backend" },
  { name: 'amp', reason: 'on npm, but every model call goes to ampcode.com: no base URL to point at a gateway' },
  { name: 'crush', reason: "the npm package's postinstall downloads a GitHub release" },
];
