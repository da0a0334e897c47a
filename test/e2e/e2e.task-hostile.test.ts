/**
 * Hostile tasks (as a public dataset may hold them) through the real stack (CLI, Temporal, Docker), with a canary
 * secret and a vendor key in the worker's environment: task env that names them, an instruction linked to
 * /proc/self/environ, folders linked outside the task, and compose files that mount the host, its Docker socket,
 * its pid namespace, publish ports, add capabilities, read host env files and re-tag images. None gets the canary
 * anywhere (results, logs, output), and every container runs without NET_RAW and with no-new-privileges.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdir, readFile, readdir, rm, stat, symlink, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import Docker from 'dockerode';

import { DockerEnvironment } from '../../src/environments/docker';
import { TRIALS_NETWORK } from '../../src/environments/docker/network';
import { environmentKey } from '../../src/environments/env-key';
import type { StartRequest } from '../../src/contracts/environment';
import { LABEL_JOB } from '../../src/contracts/environment';
import { KILL_ALL, KILL_ALL_REFUSED } from '../../src/environments/trial-container';
import { DEFAULT_PIDS_LIMIT } from '../../src/contracts/task-config';
import type { TrialResult } from '../../src/results/trial-result';
import type { EnvironmentHandle } from '../../src/contracts/trial';
import type { CliRun } from '../support/cli';
import { runCli, workspace } from '../support/cli';
import { containersOfJob, removeJobLeftovers } from '../support/docker';
import type { TestStore } from '../support/minio';
import { startTestStore } from '../support/minio';
import { readObject } from '../support/store-machines';
import { TEST_HOST_ID, TEST_SERVER, testTemporal } from '../support/temporal';

const CANARY = `canary-${randomBytes(12).toString('hex')}`;
const VENDOR_KEY = `sk-canary-${randomBytes(12).toString('hex')}`;
const WORKER_ENV = { CANARY_SECRET: CANARY, OPENAI_API_KEY: VENDOR_KEY, ALLOWED_GREETING: 'hello-allowed' };
/** A model call the agent claims it made, in the gateway's record format: a trial must never count it. */
const FORGED_CALL = {
  seq: 1,
  started_at: '2026-11-27T00:00:00.000Z',
  finished_at: '2026-11-27T00:00:01.000Z',
  latency_ms: 1000,
  dialect: 'openai-chat',
  kind: 'generate',
  method: 'POST',
  path: '/chat/completions',
  model: 'forged-model',
  stream: false,
  status: 200,
  request: { messages: [{ role: 'user', content: 'forged' }] },
  response: { choices: [{ message: { role: 'assistant', content: 'forged' } }] },
  usage: { input_tokens: 999999, output_tokens: 999999, cached_tokens: 0 },
  error: null,
};

const VICTIM_TAG = `rollout-victim-${randomBytes(4).toString('hex')}:latest`;
const docker = new Docker();

/**
 * CapEff of /proc/self/status has bit 13 (NET_RAW) and 27 (MKNOD) clear; NoNewPrivs is 1. cgroup.txt: the memory and
 * pids limits the container really got (cgroup v2 or v1).
 */
const REPORT = `grep -E '^(CapEff|NoNewPrivs)' /proc/self/status > /logs/agent/status.txt
{ cat /sys/fs/cgroup/memory.max || cat /sys/fs/cgroup/memory/memory.limit_in_bytes
  cat /sys/fs/cgroup/pids.max || cat /sys/fs/cgroup/pids/pids.max; } > /logs/agent/cgroup.txt 2>/dev/null
printf '%s|%s|%s|%s' "\${#GREETING}" "\${LEAK:-}" "\${HOMEVAR:-}" "\${SAFE:-}" > /logs/agent/env.txt`;

async function writeTask(
  dir: string,
  name: string,
  files: { toml?: string; compose?: string; solve?: string; instruction?: string | null }
): Promise<string> {
  const task = path.join(dir, name);
  await mkdir(path.join(task, 'tests'), { recursive: true });
  await mkdir(path.join(task, 'environment'), { recursive: true });
  await mkdir(path.join(task, 'solution'), { recursive: true });
  await writeFile(path.join(task, 'task.toml'), `version = "1.0"\n[agent]\ntimeout_sec = 60\n${files.toml ?? ''}`);
  await writeFile(path.join(task, 'environment', 'Dockerfile'), 'FROM debian:bookworm-slim\nWORKDIR /app\n');
  if (files.compose) await writeFile(path.join(task, 'environment', 'docker-compose.yaml'), files.compose);
  if (files.instruction !== null) await writeFile(path.join(task, 'instruction.md'), files.instruction ?? 'Do it.\n');
  await writeFile(path.join(task, 'tests', 'test.sh'), '#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n');
  await writeFile(path.join(task, 'solution', 'solve.sh'), `#!/bin/bash\n${files.solve ?? REPORT}\n`);
  return task;
}

function jobYaml(name: string, extra: string[] = []): string {
  return [
    `name: ${name}`,
    'n_concurrent_trials: 2',
    'environment:',
    '  type: docker',
    ...extra,
    'agents:',
    '  - name: oracle',
    'datasets:',
    '  - path: tasks',
    '',
  ].join('\n');
}

/** Every file under `dir`, as text. */
async function allText(dir: string): Promise<string> {
  const entries = await readdir(dir, { recursive: true, withFileTypes: true });
  const texts = await Promise.all(
    entries.filter((entry) => entry.isFile()).map((entry) => readFile(path.join(entry.parentPath, entry.name), 'utf8'))
  );
  return texts.join('\n');
}

describe('hostile tasks that run: task env and compose interpolation', () => {
  const jobName = `task-hostile-${randomBytes(3).toString('hex')}`;
  let dir: string;
  let run: CliRun;
  const trial = async (task: string) =>
    JSON.parse(
      await readFile(path.join(dir, 'jobs', jobName, `${task}__oracle__1`, 'result.json'), 'utf8')
    ) as TrialResult;
  const agentFile = (task: string, file: string) =>
    readFile(path.join(dir, 'jobs', jobName, `${task}__oracle__1`, 'agent', file), 'utf8');

  before(async () => {
    const { connection } = await testTemporal();
    await connection.close();
    dir = await workspace();
    const tasks = path.join(dir, 'tasks');
    await writeTask(tasks, 'env-thief', {
      toml: '[environment.env]\nSTOLEN = "${CANARY_SECRET}"\n[verifier.env]\nKEY = "${OPENAI_API_KEY}"\n',
      solve: 'env > /logs/agent/env-dump.txt',
    });
    await writeTask(tasks, 'allowed', {
      toml: [
        '[environment]',
        'memory = "300M"',
        'pids_limit = 200',
        '[environment.env]',
        'GREETING = "${ALLOWED_GREETING}"',
        'SAFE = "${OPENAI_API_KEY:-fallback}"',
        '',
      ].join('\n'),
    });
    await writeTask(tasks, 'compose-interpolation', {
      compose: [
        'services:',
        '  main:',
        '    environment:',
        '      LEAK: "${CANARY_SECRET:-absent}"',
        '      HOMEVAR: "${HOME:-nohome}"',
        '',
      ].join('\n'),
    });
    // Three steps, each leaving 400 kB of logs: per step they would fit the 1 MB collect budget, per trial they do not.
    const flood = await writeTask(tasks, 'step-flood', {
      toml: ['[[steps]]', 'name = "s1"', '[[steps]]', 'name = "s2"', '[[steps]]', 'name = "s3"', ''].join('\n'),
    });
    for (const step of ['s1', 's2', 's3']) {
      await mkdir(path.join(flood, 'steps', step, 'solution'), { recursive: true });
      await writeFile(path.join(flood, 'steps', step, 'instruction.md'), 'Flood.\n');
      await writeFile(
        path.join(flood, 'steps', step, 'solution', 'solve.sh'),
        '#!/bin/bash\nhead -c 400000 /dev/zero > /logs/agent/flood.bin\n'
      );
    }
    const jobKeys = ['  task_env_allow: [ALLOWED_GREETING]', '  collect_max_bytes: 1M'];
    await writeFile(path.join(dir, 'job.yaml'), jobYaml(jobName, jobKeys));
    run = await runCli(['job.yaml'], { cwd: dir, env: WORKER_ENV, timeoutMs: 10 * 60_000 });
  });
  after(() => removeJobLeftovers(jobName));

  it('completes the job and warns, before any trial, of the task that names worker variables', () => {
    assert.equal(run.code, 0, run.stderr);
    assert.match(run.stderr, /env-thief\/task\.toml: environment\.env\.STOLEN: \$\{CANARY_SECRET\}/);
    assert.match(run.stderr, /verifier\.env\.KEY: \$\{OPENAI_API_KEY\}: OPENAI_API_KEY is a vendor or cloud key/);
  });

  it('ends a task that reads variables the job does not allow before it builds, as the task error it is', async () => {
    const result = await trial('env-thief');
    assert.equal(result.error?.type, 'MissingEnvironmentVariableError');
    assert.equal(result.error?.step, 'build');
    assert.equal(result.rewards, null);
  });

  it('gives a task only the variables the job allows; a vendor key takes its default', async () => {
    assert.equal((await trial('allowed')).error, null);
    // The allowed value reached the container (its length; the value itself is scrubbed from results as a secret).
    assert.equal(await agentFile('allowed', 'env.txt'), `${WORKER_ENV.ALLOWED_GREETING.length}|||fallback`);
  });

  it("interpolates a compose file from the task's env only: no worker variable, not even HOME", async () => {
    const result = await trial('compose-interpolation');
    assert.equal(result.error, null, JSON.stringify(result.error));
    assert.equal(await agentFile('compose-interpolation', 'env.txt'), '0|absent|nohome|');
  });

  it('runs every container without NET_RAW and MKNOD, and with no-new-privileges', async () => {
    for (const task of ['allowed', 'compose-interpolation']) {
      const status = await agentFile(task, 'status.txt');
      const effective = BigInt(`0x${/CapEff:\s*([0-9a-f]+)/.exec(status)![1]}`);
      assert.equal(effective & (1n << 13n), 0n, `${task}: NET_RAW dropped (${status})`);
      assert.equal(effective & (1n << 27n), 0n, `${task}: MKNOD dropped`);
      assert.match(status, /NoNewPrivs:\s*1/, task);
    }
  });

  it("gives each container exactly the task's memory and pids, and the bounded default pids when it sets none", async () => {
    // 300M is Harbor's binary 300 MiB; a task without pids_limit gets DEFAULT_PIDS_LIMIT, never "max".
    assert.deepEqual((await agentFile('allowed', 'cgroup.txt')).trim().split('\n'), [`${300 * 2 ** 20}`, '200']);
    const [memory, pids] = (await agentFile('compose-interpolation', 'cgroup.txt')).trim().split('\n');
    assert.equal(memory, `${2 * 2 ** 30}`);
    assert.equal(pids, `${DEFAULT_PIDS_LIMIT}`);
  });

  it("bounds what a trial's steps bring to the host by the trial's collect budget, not each step's", async () => {
    const trialDir = path.join(dir, 'jobs', jobName, 'step-flood__oracle__1');
    const result = await trial('step-flood');
    assert.equal(result.step_results?.length, 3, JSON.stringify(result.error));
    let bytes = 0;
    for (const entry of await readdir(trialDir, { recursive: true, withFileTypes: true })) {
      if (!entry.isFile() || !/^(agent|verifier|artifacts|steps)(\/|$)/.test(path.relative(trialDir, entry.parentPath)))
        continue;
      if (path.relative(trialDir, path.join(entry.parentPath, entry.name)) === 'agent/llm-calls.jsonl') continue;
      bytes += (await stat(path.join(entry.parentPath, entry.name))).size;
    }
    assert.ok(bytes <= 1_000_000, `${bytes} bytes collected`);
    assert.ok(bytes >= 800_000, `the first two steps' logs were kept (${bytes} bytes)`);
    const log = await readFile(path.join(trialDir, 'trial.log'), 'utf8');
    assert.match(log, /step s3: the trial's collect_max_bytes reached, not collected: .*flood\.bin/);
  });

  it('lets the canary and the vendor key reach no result, log or output', async () => {
    const everything = `${await allText(path.join(dir, 'jobs', jobName))}\n${run.stdout}\n${run.stderr}`;
    assert.ok(!everything.includes(CANARY), 'the canary leaked');
    assert.ok(!everything.includes(VENDOR_KEY), 'the vendor key leaked');
  });

  it('leaves no containers behind', async () => {
    assert.deepEqual(await containersOfJob(jobName), []);
  });
});

describe('hostile tasks refused before any trial: links out of the task and compose files that reach the host', () => {
  const jobName = `task-refused-${randomBytes(3).toString('hex')}`;
  let dir: string;
  let run: CliRun;

  before(async () => {
    const { connection } = await testTemporal();
    await connection.close();
    dir = await workspace();
    const tasks = path.join(dir, 'tasks');
    const environ = await writeTask(tasks, 'environ-link', { instruction: null });
    await symlink('/proc/self/environ', path.join(environ, 'instruction.md'));
    const tests = await writeTask(tasks, 'tests-link', {});
    await mkdir(path.join(dir, 'outside'));
    await writeFile(path.join(dir, 'outside', 'test.sh'), 'echo 1 > /logs/verifier/reward.txt\n');
    await rm(path.join(tests, 'tests'), { recursive: true });
    await symlink(path.join(dir, 'outside'), path.join(tests, 'tests'));
    await writeTask(tasks, 'compose-host', {
      compose: [
        'services:',
        '  evil:',
        '    image: ${MAIN_IMAGE_NAME}',
        '    command: ["sleep", "infinity"]',
        '    privileged: true',
        '    pid: host',
        '    cap_add: [SYS_ADMIN]',
        '    ports: ["8080:80"]',
        '    volumes:',
        '      - /:/host',
        '      - /var/run/docker.sock:/var/run/docker.sock',
        '    networks: [outside]',
        '    environment:',
        '      STOLEN: "${CANARY_SECRET:-}"',
        '  main:',
        '    pid: host',
        '    ipc: host',
        'networks:',
        '  outside:',
        '    external: true',
        '',
      ].join('\n'),
    });
    await writeTask(tasks, 'compose-retag', {
      compose: [
        'services:',
        '  side:',
        '    build:',
        '      context: .',
        `      tags: ["${VICTIM_TAG}"]`,
        '  other:',
        '    build:',
        '      context: /',
        '',
      ].join('\n'),
    });
    await writeTask(tasks, 'compose-env-file', {
      compose: ['services:', '  main:', '    env_file: [/proc/self/environ]', ''].join('\n'),
    });
    await writeTask(tasks, 'over-caps', {
      toml: [
        '[environment]',
        'memory_mb = 1048576', // 1 TiB: more than this host has
        'pids_limit = 4000000',
        'build_timeout_sec = 1e10', // a timer of 317 years overflows to 1 ms
        '[verifier]',
        'timeout_sec = 90000',
        '[[verifier.collect]]',
        'command = "true"',
        'timeout_sec = 100000',
        '',
      ].join('\n'),
    });
    await writeFile(path.join(dir, 'job.yaml'), jobYaml(jobName));
    run = await runCli(['job.yaml'], { cwd: dir, env: WORKER_ENV, timeoutMs: 5 * 60_000 });
  });
  after(() => removeJobLeftovers(jobName));

  it('exits 2 naming each file and field', () => {
    assert.equal(run.code, 2, run.stderr);
    const expected = [
      /environ-link\/instruction\.md: resolves outside the task folder/,
      /tests-link\/tests: resolves outside the task folder/,
      /compose-host\/environment\/docker-compose\.yaml: services\.evil\.privileged: not allowed/,
      /services\.evil\.pid: not allowed/,
      /services\.evil\.cap_add: not allowed/,
      /services\.evil\.ports: not allowed/,
      /services\.evil\.volumes\.0: only the project's named volumes/,
      /services\.evil\.volumes\.1: only the project's named volumes/,
      /services\.main\.pid: not allowed/,
      /services\.main\.ipc: not allowed/,
      /networks\.outside\.external: not allowed/,
      /compose-retag\/environment\/docker-compose\.yaml: services\.side\.build\.tags: not allowed/,
      /services\.other\.build\.context: \/ is outside the task folder/,
      /compose-env-file\/environment\/docker-compose\.yaml: services\.main\.env_file: \/proc\/self\/environ is outside/,
      /over-caps\/task\.toml: environment\.memory_mb: 1 TiB of memory is over the job's cap \(job\.yaml environment\.max_memory = [\d.]+ GiB, by default the host memory less 10 %\)/,
      /over-caps\/task\.toml: environment\.pids_limit: 4000000 of pids is over the job's cap \(job\.yaml environment\.max_pids = 32768\)/,
      /over-caps\/task\.toml: environment\.build_timeout_sec: 10000000000 s is over the job's cap \(job\.yaml environment\.max_timeout_sec = 86400\)/,
      /over-caps\/task\.toml: verifier\.timeout_sec: 90000 s is over/,
      /over-caps\/task\.toml: verifier\.collect\.0\.timeout_sec: 100000 s is over/,
    ];
    for (const line of expected) assert.match(run.stderr, line);
  });

  it('runs nothing: no container, no re-tagged image, and the canary nowhere', async () => {
    assert.deepEqual(await containersOfJob(jobName), []);
    await assert.rejects(docker.getImage(VICTIM_TAG).inspect(), /no such image/i);
    assert.ok(!`${run.stdout}\n${run.stderr}`.includes(CANARY), 'the canary leaked');
  });
});

describe('trial containers on one Docker host, at the environment level', () => {
  const envJob = `task-neighbours-${randomBytes(3).toString('hex')}`;
  const environment = new DockerEnvironment({ hostId: `neighbours-${TEST_HOST_ID}`, deployment: envJob });
  let image: string;
  let listener: EnvironmentHandle;
  let neighbour: EnvironmentHandle;
  const extra: string[] = [];
  const request = (trial: string): StartRequest => ({
    image,
    jobName: envJob,
    trialId: `${envJob}/${trial}`,
    trialName: trial,
    workerId: `neighbours-${TEST_HOST_ID}~1`,
    resources: { cpus: 0.5, memoryBytes: 256 * 2 ** 20, storageBytes: 0, pidsLimit: 100 },
    env: {},
  });

  before(async () => {
    const contextDir = await workspace();
    await writeFile(path.join(contextDir, 'Dockerfile'), 'FROM debian:bookworm-slim\n');
    const envKey = await environmentKey(contextDir, null);
    ({ image } = await environment.build({
      contextDir,
      envKey,
      dockerImage: null,
      force: false,
      jobName: envJob,
      timeoutMs: 120_000,
    }));
    ({ handle: listener } = await environment.start(request('listener')));
    ({ handle: neighbour } = await environment.start(request('neighbour')));
    // A TCP listener in one trial (perl is in every Debian image); the other trial tries to reach it.
    await environment.exec(listener, { command: `setsid nohup perl ${LISTEN} >/dev/null 2>&1 &`, timeoutMs: 10_000 });
  });
  after(async () => {
    for (const id of extra)
      await docker
        .getContainer(id)
        .remove({ force: true })
        .catch(() => undefined);
    await removeJobLeftovers(envJob);
  });

  it('keeps trials apart: one trial cannot connect to another trial on the same host', async () => {
    const info = await docker.getContainer(listener.id).inspect();
    const address = info.NetworkSettings.Networks[TRIALS_NETWORK]?.IPAddress;
    assert.ok(address, `on ${TRIALS_NETWORK}: ${Object.keys(info.NetworkSettings.Networks).join(', ')}`);
    // The listener may take a moment to start on a loaded host: waited for (bounded) from inside its container.
    const wait = `for i in $(seq 1 60); do ${connect('127.0.0.1')} | grep -q connected && break; sleep 0.5; done`;
    await environment.exec(listener, { command: wait, timeoutMs: 60_000 });
    const itself = await environment.exec(listener, { command: connect('127.0.0.1'), timeoutMs: 20_000 });
    assert.equal(itself.stdout.trim(), 'connected', 'the listener is up');
    const across = await environment.exec(neighbour, { command: connect(address), timeoutMs: 20_000 });
    assert.equal(across.stdout.trim(), 'refused', `the neighbour reached the listener: ${across.stderr}`);
  });

  it("never runs kill-all in a container that shares another's processes: it is restarted instead", async () => {
    const sharing = await docker.createContainer({
      Image: image,
      Entrypoint: ['sleep', 'infinity'],
      Labels: { [LABEL_JOB]: envJob },
      HostConfig: { PidMode: `container:${listener.id}`, NetworkMode: 'none' },
    });
    extra.push(sharing.id);
    await sharing.start();
    await environment.killAll({ id: sharing.id, workdir: '/' });
    const still = await environment.exec(listener, { command: connect('127.0.0.1'), timeoutMs: 20_000 });
    assert.equal(still.stdout.trim(), 'connected', "the other container's processes live on");
  });

  it("refuses kill-all inside the host's pid namespace (kill itself replaced: nothing can be killed here)", async () => {
    const hostPid = await docker.createContainer({
      Image: image,
      Entrypoint: ['sleep', 'infinity'],
      Labels: { [LABEL_JOB]: envJob },
      HostConfig: { PidMode: 'host', NetworkMode: 'none' },
    });
    extra.push(hostPid.id);
    await hostPid.start();
    const exec = await hostPid.exec({
      Cmd: ['bash', '-c', `kill() { echo would-kill; }; ${KILL_ALL}`],
      AttachStdout: true,
      AttachStderr: true,
    });
    const stream = await exec.start({});
    let output = '';
    stream.on('data', (chunk: Buffer) => (output += chunk.toString()));
    await new Promise((resolve) => stream.on('end', resolve));
    assert.equal((await exec.inspect()).ExitCode, KILL_ALL_REFUSED);
    assert.doesNotMatch(output, /would-kill/);
  });
});

const LISTEN = `-MIO::Socket::INET -e '$s = IO::Socket::INET->new(LocalPort => 7000, Listen => 5, ReuseAddr => 1) or die; while ($c = $s->accept) { close $c }'`;
/** Prints whether a TCP connection to `address`:7000 opens within 5 s. */
const connect = (address: string) =>
  `timeout 5 bash -c 'exec 3<>/dev/tcp/${address}/7000' 2>/dev/null && echo connected || echo refused`;

describe('a hostile trial in a job in a bucket (real MinIO): collect that fails half-way, a forged llm-calls.jsonl, verifier logs over the limit', () => {
  const jobName = `task-bucket-${randomBytes(3).toString('hex')}`;
  const bucket = `rollout-hostile-${TEST_SERVER.port}`;
  let store: TestStore;
  let dir: string;
  let run: CliRun;
  const trialKey = (task: string, file: string) => `jobs/${jobName}/${task}__oracle__1/${file}`;

  before(async () => {
    store = await startTestStore();
    await store.createBucket(bucket);
    const { connection } = await testTemporal();
    await connection.close();
    dir = await workspace();
    const tasks = path.join(dir, 'tasks');
    // The task is allowed the canary (as a dataset may need an HF_TOKEN), writes it into its logs, forges the
    // gateway's record of model calls, then leaves a folder deeper than the host's PATH_MAX: extraction fails there,
    // after the canary and the forged file were written on the host.
    await writeTask(tasks, 'collect-breaker', {
      toml: '[solution.env]\nTOKEN = "${CANARY_SECRET}"\n',
      solve: [
        'echo "stolen: $TOKEN" > /logs/agent/a-leak.txt',
        `echo '${JSON.stringify(FORGED_CALL)}' > /logs/agent/llm-calls.jsonl`,
        'cd /logs/agent && d=$(printf "z%.0s" $(seq 1 200))',
        'for i in $(seq 1 20); do mkdir "$d" && cd "$d" || break; done',
        'echo deep > f.txt',
      ].join('\n'),
    });
    // A separate verifier whose test.sh fills /logs/verifier far beyond the job's collect limit.
    const flood = await writeTask(tasks, 'verifier-flood', { solve: 'true' });
    await writeFile(
      path.join(flood, 'task.toml'),
      'version = "1.0"\n[agent]\ntimeout_sec = 60\n[verifier]\nenvironment_mode = "separate"\n'
    );
    await writeFile(
      path.join(flood, 'tests', 'Dockerfile'),
      'FROM debian:bookworm-slim\nCOPY test.sh /tests/test.sh\n'
    );
    await writeFile(
      path.join(flood, 'tests', 'test.sh'),
      '#!/bin/bash\nhead -c 3000000 /dev/zero > /logs/verifier/flood.bin\necho 1 > /logs/verifier/reward.txt\n'
    );
    await writeFile(
      path.join(dir, 'job.yaml'),
      jobYaml(jobName, ['  task_env_allow: [CANARY_SECRET]', '  collect_max_bytes: 1Mi']).replace(
        `name: ${jobName}\n`,
        `name: ${jobName}\njobs_dir: s3://${bucket}/jobs\n`
      )
    );
    run = await runCli(['job.yaml'], { cwd: dir, env: { ...store.env, ...WORKER_ENV }, timeoutMs: 10 * 60_000 });
  });
  after(async () => {
    await removeJobLeftovers(jobName);
    await store?.stop();
  });

  it('completes the job, the failed collect recorded as a clean-up error, never as the agent failing', async () => {
    assert.equal(run.code, 0, run.stderr);
    const result = JSON.parse(
      await readObject(store, bucket, trialKey('collect-breaker', 'result.json'))
    ) as TrialResult;
    assert.equal(result.error, null, JSON.stringify(result.error));
    assert.deepEqual(result.rewards, { reward: 1 });
    assert.ok(
      result.cleanup_errors?.some((error) => error.step === 'collect'),
      JSON.stringify(result.cleanup_errors)
    );
  });

  it("never takes the agent's llm-calls.jsonl as the trial's usage record", async () => {
    const result = JSON.parse(
      await readObject(store, bucket, trialKey('collect-breaker', 'result.json'))
    ) as TrialResult;
    assert.equal(result.usage, null, 'no gateway, no usage: the forged record is not counted');
    const objects = await store.objects(bucket, `jobs/${jobName}/`);
    assert.ok(!objects.has(trialKey('collect-breaker', 'agent/llm-calls.jsonl')), [...objects.keys()].join('\n'));
    assert.ok(!objects.has(trialKey('collect-breaker', 'agent/trajectory.json')));
  });

  it('scrubs what a failed collect extracted, so the canary is in no bucket object', async () => {
    const objects = await store.objects(bucket, `jobs/${jobName}/`);
    assert.ok(objects.has(trialKey('collect-breaker', 'agent/a-leak.txt')), 'the leak was extracted before it broke');
    assert.equal(
      await readObject(store, bucket, trialKey('collect-breaker', 'agent/a-leak.txt')),
      'stolen: [REDACTED]\n'
    );
    for (const key of objects.keys()) {
      assert.ok(!key.includes(CANARY), `the canary in a key: ${key}`);
      const body = await readObject(store, bucket, key);
      assert.ok(!body.includes(CANARY), `the canary leaked into ${key}`);
      assert.ok(!body.includes(VENDOR_KEY), `the vendor key leaked into ${key}`);
      assert.ok(!key.endsWith('.rollout-scrub-pending'), `the scrub mark uploaded: ${key}`);
    }
    assert.ok(!`${run.stdout}\n${run.stderr}`.includes(CANARY), 'the canary in the CLI output');
  });

  it("copies a separate verifier's /logs/verifier within the job's collect limit", async () => {
    const result = JSON.parse(
      await readObject(store, bucket, trialKey('verifier-flood', 'result.json'))
    ) as TrialResult;
    assert.equal(result.error, null, JSON.stringify(result.error));
    const log = await readObject(store, bucket, trialKey('verifier-flood', 'trial.log'));
    assert.match(
      log,
      /separate verifier's \/logs\/verifier: collect_max_bytes reached, not copied: verifier\/flood\.bin/
    );
    const objects = await store.objects(bucket, `jobs/${jobName}/verifier-flood__oracle__1/`);
    assert.ok(!objects.has(trialKey('verifier-flood', 'verifier/flood.bin')));
  });
});
