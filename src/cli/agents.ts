import type { BuiltinAgentDefinition } from '../agents/builtin';
import { BUILTIN_AGENTS, UNSUPPORTED_AGENTS } from '../agents/registry';

/** `rollout agents list`: the catalogue, one agent a line, then the agents not built in (not verifiable here) and why. */
export function renderAgentList(): string {
  const rows = [
    ['agent', 'version', 'installs from', 'wire API', 'verified end to end'],
    ...BUILTIN_AGENTS.map((agent) => [
      agent.name,
      agent.version,
      source(agent),
      agent.wireApi,
      agent.verified ? 'yes' : 'no',
    ]),
  ];
  const widths = rows[0]!.map((_, column) => Math.max(...rows.map((row) => row[column]!.length)));
  const lines = rows.map((row) =>
    row
      .map((cell, column) => cell.padEnd(widths[column]!))
      .join('  ')
      .trimEnd()
  );
  lines.push('', 'not built in (not verifiable here):');
  for (const agent of UNSUPPORTED_AGENTS) lines.push(`  ${agent.name}: ${agent.reason}`);
  return lines.join('\n');
}

function source(agent: BuiltinAgentDefinition): string {
  if (agent.kind === 'worker') return 'nothing (runs in the worker)';
  const { registry, package: name } = agent.source;
  return `${registry} ${name}`;
}
