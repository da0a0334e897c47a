/**
 * The gateway's call records (`agent/llm-calls.jsonl`) while collect brings the container's /logs/agent in over the
 * trial's agent folder: set aside first, put back after, and the container's file of that name deleted. Usage, cost,
 * the trajectory and exports are built from this file: it is Rollout's record, never the agent's.
 */
import { existsSync } from 'node:fs';
import { rename, rm, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';

import { ifPresent } from '../files/absent';
import { LLM_CALLS_FILE, trialLayout } from '../contracts/paths';

/** Where collect sets the gateway's call records aside while the container's /logs/agent comes in over them. */
const GATEWAY_CALLS_ASIDE = `.gateway-${LLM_CALLS_FILE}`;

function callsFile(trialDir: string): string {
  return trialLayout(trialDir).llmCalls;
}

/**
 * The gateway's records moved aside, or an empty file there when it wrote none: while that file exists, whatever is
 * at agent/llm-calls.jsonl came from the container. (A retried collect finds them already aside.)
 */
export async function setGatewayCallsAside(trialDir: string): Promise<void> {
  const aside = path.join(trialDir, GATEWAY_CALLS_ASIDE);
  if (existsSync(aside)) return;
  const moved = await ifPresent(rename(callsFile(trialDir), aside).then(() => true));
  if (!moved) await writeFile(aside, '', { flag: 'wx' });
}

/**
 * The gateway's call records back in place, if a collect set them aside. They are Rollout's: a file of that name
 * from the container never replaces them nor stands in for them (usage, cost and the trajectory are built from it),
 * so it is deleted, whether or not the gateway wrote any. Also run before a result is written or a folder uploaded:
 * a collect whose worker died half-way left the records aside.
 */
export async function restoreGatewayCalls(trialDir: string): Promise<void> {
  const aside = path.join(trialDir, GATEWAY_CALLS_ASIDE);
  const kept = await ifPresent(stat(aside));
  if (!kept) return;
  await rm(callsFile(trialDir), { recursive: true, force: true }); // a folder of that name too
  if (kept.size > 0) await rename(aside, callsFile(trialDir));
  else await rm(aside);
}
