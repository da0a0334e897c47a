/**
 * Running a catalogue agent that installs into the task's container. The install is a bash script of Rollout's own:
 * a prefix per agent and version under /opt/rollout (npm --prefix, or a venv), Node 22 copied in from the worker's
 * cache when the image has no Node ≥ 22, apt only for the few system packages an agent needs, a marker file that
 * makes it idempotent, and the installed version read back from the package manager. The agent then runs by absolute
 * path, so another version on the image's PATH never wins.
 */
import { createHash } from 'node:crypto';

import type { AgentConfig } from '../contracts/job-config';
import type { Agent, AgentRun, InstallOutcome } from '../contracts/agent';
import { CONTAINER_SHELL_PATHS } from '../contracts/paths';
import { uploadAgentScript } from './upload';
import type { InstalledAgentDefinition } from './builtin';
import { AGENTS_ROOT } from '../contracts/paths';
import { agentPrefix } from './builtin';
import { shellQuote } from '../shell';
import { hostNodeRuntime, NODE_RUNTIME, NODE_RUNTIME_DIR } from './node-runtime';
import { DEFAULT_MIN_PYTHON, pythonInstallLines } from './python-runtime';

const MARKER = '.rollout-installed';
/** Sourced before every run: puts the Node the agent was installed with first on PATH. */
const RUN_ENV = '.rollout-env';
const MIN_NODE_MAJOR = 22;
const UV_VERSION = '0.13.8';
const UV_DIR = `${AGENTS_ROOT}/uv-${UV_VERSION}`;

export interface InstallPlan {
  name: string;
  version: string;
  prefix: string;
  script: string;
  /** Content hash of the install script: part of the snapshot key, so a changed recipe never reuses an old install. */
  key: string;
  needsNode: boolean;
}

export function installPlan(definition: InstalledAgentDefinition, config: AgentConfig): InstallPlan {
  const version = config.version ?? definition.version;
  const prefix = agentPrefix(definition.name, version);
  const script = installScript(definition, version, prefix);
  const key = createHash('sha256').update(script).digest('hex');
  return { name: definition.name, version, prefix, script, key, needsNode: definition.source.registry === 'npm' };
}

export function installedAgent(definition: InstalledAgentDefinition, config: AgentConfig): Agent {
  const plan = installPlan(definition, config);
  return {
    name: config.name,
    install: (run) => install(run, plan),
    async execute(run) {
      const kwargs = definition.kwargs.parse(config.kwargs ?? {});
      const bin = `${plan.prefix}/bin/${definition.source.bin}`;
      const command = definition.run({
        model: config.model,
        kwargs,
        bin,
        logsDir: `${CONTAINER_SHELL_PATHS.logs}/agent`,
      });
      const script = `[ -f ${plan.prefix}/${RUN_ENV} ] && . ${plan.prefix}/${RUN_ENV}\n${command.script}\n`;
      await uploadAgentScript(run, 'execute.sh', script);
      return run.environment.exec(run.handle, {
        command: `bash "${CONTAINER_SHELL_PATHS.agentScripts}/execute.sh"`,
        // The agent's own settings are defaults: what job.yaml sets in `env` wins.
        env: { ...command.env, ...run.env },
        user: run.user,
        timeoutMs: run.timeoutMs,
        signal: run.signal,
      });
    },
  };
}

async function install(run: AgentRun, plan: InstallPlan): Promise<InstallOutcome> {
  const installed = await installedVersion(run, plan);
  if (installed !== null) {
    const note = `${plan.name} ${installed} already installed in ${plan.prefix} (install snapshot or earlier run)\n`;
    await run.environment.exec(run.handle, {
      command: `printf '%s' ${shellQuote(note)} > "${CONTAINER_SHELL_PATHS.logs}/agent/install.txt"`,
    });
    return { exitCode: 0, stdout: '', stderr: '', timedOut: false, version: installed, fresh: false };
  }
  if (plan.needsNode) await run.environment.upload(run.handle, await hostNodeRuntime(), NODE_RUNTIME_DIR);
  await uploadAgentScript(run, 'install.sh', plan.script);
  const result = await run.environment.exec(run.handle, {
    command: `bash "${CONTAINER_SHELL_PATHS.agentScripts}/install.sh" > "${CONTAINER_SHELL_PATHS.logs}/agent/install.txt" 2>&1`,
    // The API keys of `env` are not needed to install: they stay out of the install.
    timeoutMs: run.timeoutMs,
    signal: run.signal,
    user: '0',
  });
  const version = result.exitCode === 0 ? await installedVersion(run, plan) : null;
  return { ...result, version, fresh: true };
}

async function installedVersion(run: AgentRun, plan: InstallPlan): Promise<string | null> {
  const read = await run.environment.exec(run.handle, { command: `cat ${plan.prefix}/${MARKER} 2>/dev/null` });
  return read.exitCode === 0 && read.stdout.trim() ? read.stdout.trim() : null;
}

/** The install, as one bash script; it logs every step to agent/install.txt. */
function installScript(definition: InstalledAgentDefinition, version: string, prefix: string): string {
  const { source } = definition;
  const probe = definition.probeArgs ?? '--version';
  const lines = [
    'set -eo pipefail',
    `prefix=${prefix}`,
    `if [ -f "$prefix/${MARKER}" ]; then echo "rollout: already installed in $prefix"; exit 0; fi`,
    'export DEBIAN_FRONTEND=noninteractive',
    'missing=()',
    ...Object.entries(definition.systemPackages).map(
      ([pkg, command]) => `command -v ${command} >/dev/null 2>&1 || missing+=(${pkg})`
    ),
  ];
  lines.push(
    'if [ ${#missing[@]} -gt 0 ]; then',
    '  command -v apt-get >/dev/null || { echo "rollout: needs the Debian packages ${missing[*]}, and the image has no apt-get" >&2; exit 1; }',
    '  echo "rollout: apt-get install ${missing[*]}"',
    '  apt-get update -qq',
    '  apt-get install -y -qq --no-install-recommends "${missing[@]}"',
    '  rm -rf /var/lib/apt/lists/*',
    'fi',
    'mkdir -p "$prefix"'
  );
  if (source.registry === 'npm') {
    const npmPackages = [`${source.package}@${version}`, ...(source.extraPackages ?? [])];
    lines.push(
      `if command -v node >/dev/null && command -v npm >/dev/null && node -e 'process.exit(+process.versions.node.split(".")[0] >= ${MIN_NODE_MAJOR} ? 0 : 1)'; then`,
      '  echo "rollout: using the image\'s Node $(node --version)"',
      '  : > "$prefix/' + RUN_ENV + '"',
      'else',
      `  echo "rollout: using Node ${NODE_RUNTIME.node} and npm ${NODE_RUNTIME.npm} from the npm registry (${NODE_RUNTIME_DIR})"`,
      `  echo 'export PATH="${NODE_RUNTIME_DIR}/bin:$PATH"' > "$prefix/${RUN_ENV}"`,
      'fi',
      `. "$prefix/${RUN_ENV}"`,
      `echo "rollout: npm install -g ${npmPackages.join(' ')}"`,
      `npm install -g --prefix "$prefix" --no-fund --no-audit --loglevel=error ${npmPackages.map(shellQuote).join(' ')}`,
      `installed=$(node -p 'require(process.argv[1]).version' "$prefix/lib/node_modules/${source.package}/package.json")`
    );
  } else {
    const packages = [`${source.package}==${version}`, ...(source.extraPackages ?? [])].map(shellQuote).join(' ');
    lines.push(
      ...pythonInstallLines(source.minPython ?? DEFAULT_MIN_PYTHON),
      '"$py" -m venv "$prefix"',
      `: > "$prefix/${RUN_ENV}"`,
      // uv (from PyPI, in a venv of its own shared by the Python agents) installs several times faster than pip.
      `uv=${UV_DIR}`,
      `if [ ! -x "$uv/bin/uv" ]; then echo "rollout: pip install uv==${UV_VERSION} into $uv"; "$py" -m venv "$uv"; "$uv/bin/pip" install --no-cache-dir --disable-pip-version-check -q uv==${UV_VERSION}; fi`,
      `echo "rollout: uv pip install ${source.package}==${version} into $prefix"`,
      `UV_LINK_MODE=copy "$uv/bin/uv" pip install --no-cache --quiet --python "$prefix/bin/python" ${packages}`,
      `installed=$("$prefix/bin/python" -c 'import sys; from importlib.metadata import version; print(version(sys.argv[1]))' ${shellQuote(source.package)})`
    );
  }
  lines.push(
    `if [ "$installed" != ${shellQuote(version)} ]; then echo "rollout: asked for ${version}, installed $installed" >&2; exit 1; fi`,
    `echo "rollout: ${source.bin} ${probe}"`,
    `timeout 120 "$prefix/bin/${source.bin}" ${probe} </dev/null`,
    `printf '%s' "$installed" > "$prefix/${MARKER}"`,
    `echo "rollout: installed ${definition.name} $installed"`
  );
  return `${lines.join('\n')}\n`;
}
