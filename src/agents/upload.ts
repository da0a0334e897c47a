import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';

import type { AgentRun } from '../contracts/agent';

/** Copies a script into the container's agent-scripts folder, where `${CONTAINER_SHELL_PATHS.agentScripts}/<name>` finds it. */
export async function uploadAgentScript(run: AgentRun, name: string, script: string): Promise<void> {
  const folder = await mkdtemp(path.join(tmpdir(), 'rollout-agent-'));
  try {
    await writeFile(path.join(folder, name), script, { mode: 0o755 });
    await run.environment.upload(run.handle, path.join(folder, name), '/installed-agent');
  } finally {
    await rm(folder, { recursive: true, force: true });
  }
}
