/**
 * Agents that cheat or break things, through the real stack (CLI, Temporal, Docker): a daemon left to forge the
 * reward, files written beside Rollout's own, a container with /bin and /usr deleted, failing and overlong installs,
 * a verifier that overruns, a 10 MB reward.json, a 1 MiB instruction, limits (cpus, memory, pids) reaching the
 * container, collect limits, and secrets in file names and of two characters.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdir, readFile, readdir, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import type { TrialResult } from '../../src/results/trial-result';
import type { CliRun } from '../support/cli';
import { runCli, workspace } from '../support/cli';
import { containersOfJob, removeJobLeftovers } from '../support/docker';
import { testTemporal } from '../support/temporal';

const jobName = `hostile-${randomBytes(3).toString('hex')}`;
const SHORT_SECRET = 'k9';
const LONG_SECRET = `sk-${randomBytes(10).toString('hex')}`;
const INSTRUCTION = `Do the task.\n${'x'.repeat(2 ** 20 - 13)}`;
let dir: string;
let run: CliRun;

const trialDir = (agent: string) => path.join(dir, 'jobs', jobName, `hostile__${agent}__1`);
const trial = async (agent: string) =>
  JSON.parse(await readFile(path.join(trialDir(agent), 'result.json'), 'utf8')) as TrialResult;

const TEST_SH = `#!/bin/bash
if [ -f /app/stall ]; then sleep 300; fi
if [ -f /app/big-reward ]; then
  { printf '{"reward": 0.5'; head -c 10485760 /dev/zero | tr '\\0' ' '; printf '}'; } > /logs/verifier/reward.json
  exit 0
fi
echo 0 > /logs/verifier/reward.txt
sleep 2
`;

/** Each agent's scripts (YAML block scalars), indented under its entry. */
const AGENTS: Record<string, Record<string, string>> = {
  forger: {
    execute: `setsid nohup bash -c 'while :; do echo 1 > /logs/verifier/reward.txt 2>/dev/null; sleep 0.05; done' >/dev/null 2>&1 &
echo left a daemon behind`,
  },
  breaker: { execute: 'rm -rf /bin /usr 2>/dev/null\nexit 0' },
  impostor: {
    execute: `echo forged > /logs/trial.log
echo '{"forged": true}' > /logs/result.json
echo mine > /logs/agent/mine.txt
echo "token=$SHORT_KEY and k99" > /logs/agent/short.txt
echo secret-named > "/logs/agent/file-$LONG_KEY.txt"`,
  },
  'bad-install': { install: 'exit 3', execute: 'true' },
  'slow-install': { install: 'sleep 300', execute: 'true' },
  stall: { execute: 'touch /app/stall' },
  'big-reward': { execute: 'touch /app/big-reward' },
  limits: {
    execute: `pids=$(cat /sys/fs/cgroup/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids/pids.max)
memory=$(cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes)
cpu=$(cut -d' ' -f1 /sys/fs/cgroup/cpu.max 2>/dev/null || cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us)
echo "$cpu $memory $pids" > /logs/agent/limits.txt
wc -c < "$ROLLOUT_TASK_INSTRUCTION_FILE" > /logs/agent/instruction-bytes.txt
echo "\${ROLLOUT_TASK_INSTRUCTION:-unset}" > /logs/agent/instruction-variable.txt`,
  },
  collector: {
    execute: `for i in $(seq 1 40); do head -c 1000 /dev/zero > /logs/agent/small-$i.txt; done
head -c 20000000 /dev/zero > /logs/agent/huge.bin`,
  },
};

function agentYaml(): string[] {
  return Object.entries(AGENTS).flatMap(([name, scripts]) => [
    `  - name: ${name}`,
    ...(name === 'slow-install' ? ['    install_timeout_sec: 3'] : []),
    ...(name === 'impostor' ? ['    env:', '      SHORT_KEY: ${SHORT_SECRET}', '      LONG_KEY: ${LONG_SECRET}'] : []),
    ...Object.entries(scripts).flatMap(([step, script]) => [
      `    ${step}: |`,
      ...script.split('\n').map((line) => `      ${line}`),
    ]),
  ]);
}

describe('hostile agents', () => {
  before(async () => {
    const { connection } = await testTemporal(); // the tests' Temporal server, started if needed
    await connection.close();
    dir = await workspace();
    const task = path.join(dir, 'tasks', 'hostile');
    await mkdir(path.join(task, 'tests'), { recursive: true });
    await mkdir(path.join(task, 'environment'), { recursive: true });
    await writeFile(
      path.join(task, 'task.toml'),
      'version = "1.0"\n[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 20\n[environment]\npids_limit = 48\n'
    );
    await writeFile(path.join(task, 'environment', 'Dockerfile'), 'FROM debian:bookworm-slim\nWORKDIR /app\n');
    await writeFile(path.join(task, 'instruction.md'), INSTRUCTION);
    await writeFile(path.join(task, 'tests', 'test.sh'), TEST_SH);
    await writeFile(
      path.join(dir, 'job.yaml'),
      [
        `name: ${jobName}`,
        'n_concurrent_trials: 3',
        'environment:',
        '  type: docker',
        '  override_cpus: 0.5',
        '  override_memory: 300Mi',
        '  pids_limit: 64',
        '  collect_max_files: 30',
        '  collect_max_bytes: 12M',
        'agents:',
        ...agentYaml(),
        'datasets:',
        '  - path: tasks',
        '',
      ].join('\n')
    );
    run = await runCli(['job.yaml'], {
      cwd: dir,
      env: { SHORT_SECRET, LONG_SECRET },
      timeoutMs: 15 * 60_000,
    });
  });
  after(() => removeJobLeftovers(jobName));

  it('completes the job', () => {
    assert.equal(run.code, 0, run.stderr);
  });

  it('kills what the agent left running before the verifier runs, so it cannot forge the reward', async () => {
    const result = await trial('forger');
    assert.equal(result.error, null);
    assert.deepEqual(result.rewards, { reward: 0 }, 'the daemon rewrote reward.txt during verification');
  });

  it("collects only agent/ and verifier/: the agent's trial.log and result.json never replace Rollout's", async () => {
    const result = await trial('impostor');
    assert.equal(result.trial_name, 'hostile__impostor__1');
    assert.deepEqual(result.rewards, { reward: 0 });
    const log = await readFile(path.join(trialDir('impostor'), 'trial.log'), 'utf8');
    assert.ok(!log.includes('forged'), log);
    assert.match(log, /\bexecute\b/);
    assert.equal(await readFile(path.join(trialDir('impostor'), 'agent', 'mine.txt'), 'utf8'), 'mine\n');
  });

  it('redacts a two-character secret where it stands alone, and secrets in file names', async () => {
    const agentDir = path.join(trialDir('impostor'), 'agent');
    assert.equal(await readFile(path.join(agentDir, 'short.txt'), 'utf8'), 'token=[REDACTED] and k99\n');
    const names = await readdir(agentDir);
    assert.ok(names.includes('file-[REDACTED].txt'), names.join());
    assert.ok(!names.some((name) => name.includes(LONG_SECRET)));
  });

  it('scores an agent that broke its container (deleted /bin, /usr) as EnvironmentBrokenError, run once', async () => {
    const result = await trial('breaker');
    assert.equal(result.error?.type, 'EnvironmentBrokenError', JSON.stringify(result.error));
    assert.equal(result.restarts, 0);
    assert.equal(result.rewards, null);
    const log = await readFile(path.join(trialDir('breaker'), 'trial.log'), 'utf8');
    assert.equal(log.match(/running agent breaker/g)?.length, 1, log);
  });

  it('records a failing install as AgentInstallError and an overlong one as AgentInstallTimeoutError', async () => {
    const failed = await trial('bad-install');
    assert.equal(failed.error?.type, 'AgentInstallError');
    assert.equal(failed.error?.step, 'install');
    const slow = await trial('slow-install');
    assert.equal(slow.error?.type, 'AgentInstallTimeoutError');
    assert.equal(slow.error?.step, 'install');
  });

  it('records a verifier that overruns its timeout as VerifierTimeoutError', async () => {
    const result = await trial('stall');
    assert.equal(result.error?.type, 'VerifierTimeoutError');
    assert.equal(result.error?.step, 'verify');
    assert.equal(result.rewards, null);
  });

  it('reads a valid 10 MB reward.json as a file', async () => {
    const result = await trial('big-reward');
    assert.equal(result.error, null, JSON.stringify(result.error));
    assert.deepEqual(result.rewards, { reward: 0.5 });
  });

  it('gives the agent a 1 MiB instruction as a file, and the variable only when it fits', async () => {
    assert.equal((await trial('limits')).error, null);
    const agentDir = path.join(trialDir('limits'), 'agent');
    assert.equal((await readFile(path.join(agentDir, 'instruction-bytes.txt'), 'utf8')).trim(), `${2 ** 20}`);
    assert.equal((await readFile(path.join(agentDir, 'instruction-variable.txt'), 'utf8')).trim(), 'unset');
  });

  it('applies override_cpus, override_memory and the pids limit (job over task) to the container', async () => {
    const limits = await readFile(path.join(trialDir('limits'), 'agent', 'limits.txt'), 'utf8');
    assert.equal(limits.trim(), `50000 ${300 * 2 ** 20} 64`);
  });

  it('caps what is collected at the job limits and records what was cut', async () => {
    const result = await trial('collector');
    assert.ok(result.collected, 'a collect report');
    assert.notEqual(result.collected.limit_reached, null);
    assert.ok(result.collected.cut.length > 0);
    assert.ok(result.collected.files <= 30 && result.collected.bytes <= 12e6, JSON.stringify(result.collected));
    const agentDir = path.join(trialDir('collector'), 'agent');
    let bytes = 0;
    const names = await readdir(agentDir);
    for (const name of names) bytes += (await stat(path.join(agentDir, name))).size;
    assert.ok(names.length <= 30 && bytes <= 12e6, `${names.length} files, ${bytes} bytes on disk`);
    assert.equal((await trial('limits')).collected?.limit_reached, null);
  });

  it('leaves no containers behind', async () => {
    assert.deepEqual(await containersOfJob(jobName), []);
  });
});
