/**
 * The catalogue of pre-integrated agents: one file per agent, one entry here. `oracle` and custom agents (install
 * and execute scripts in job.yaml) are not in it.
 */
import aider from './aider';
import type { BuiltinAgentDefinition } from './builtin';
import claudeCode from './claude-code';
import cline from './cline';
import codex from './codex';
import continueCli from './continue-cli';
import copilotCli from './copilot-cli';
import factoryDroid from './factory-droid';
import geminiCli from './gemini-cli';
import gptme from './gptme';
import grokCli from './grok-cli';
import hermes from './hermes';
import kilo from './kilo';
import kimi from './kimi';
import miniSweAgent from './mini-swe-agent';
import mistralVibe from './mistral-vibe';
import opencode from './opencode';
import pi from './pi';
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
  copilotCli,
  pi,
  kimi,
  cline,
  grokCli,
  kilo,
  continueCli,
  mistralVibe,
  hermes,
  factoryDroid,
  gptme,
  terminus,
];

export function builtinAgent(name: string): BuiltinAgentDefinition | undefined {
  return BUILTIN_AGENTS.find((agent) => agent.name === name);
}

/**
 * Agents studied but not shipped, and why: not installable from a package registry onto the images available here,
 * not drivable against a model endpoint Rollout controls, or not verified yet. Printed by `rollout agents list` and
 * kept in docs/agents.md.
 */
export const UNSUPPORTED_AGENTS: readonly { name: string; reason: string }[] = [
  { name: 'goose', reason: 'released only as GitHub downloads (no npm or PyPI package)' },
  { name: 'cursor-cli', reason: "installed by a curl script; all inference goes to Cursor's own backend" },
  { name: 'amp', reason: 'on npm, but every model call goes to ampcode.com: no base URL to point at a gateway' },
  { name: 'crush', reason: "the npm package's postinstall downloads a GitHub release" },
  {
    name: 'openhands',
    reason:
      'the CLI (PyPI openhands 1.16) needs exactly Python 3.12: Debian has 3.11 (bookworm) and 3.13 (trixie), and Python builds come from GitHub',
  },
  {
    name: 'auggie',
    reason: "on npm, but every model call goes to Augment's own service: no base URL to point at a gateway",
  },
  { name: 'swe-agent', reason: 'installed by a git clone from GitHub (no package on PyPI)' },
];
