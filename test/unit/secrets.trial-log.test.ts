/**
 * trial.log lines written after collect's scrub (stop, cleanup, upload, the result step's cleanup errors) carry the
 * trial's secrets redacted too (security review M1), and a line whose secrets cannot be worked out (a config.json
 * changed after it was signed) is never written: the step fails instead. A literal secret-valued agent env value
 * (`--ae AGENT_API_TOKEN=…`, which reaches the container as it is) is the secret.
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readFile, rm, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import { writeTrialResult } from '../../activities/results';
import { log, scrubTrialFolder } from '../../activities/secrets';
import type { TrialSpec } from '../../src/contracts/trial';
import { REDACTED } from '../../src/results/scrub';
import type { TrialResult } from '../../src/results/trial-result';
import { writeSignedJobFile } from '../../src/storage/job-folder';

const REPO_ROOT = path.resolve(__dirname, '..', '..', '..');
const SECRET = `sk-canary-${randomBytes(12).toString('hex')}`;
const AGENT = 'hostile-agent';

function trialResult(spec: TrialSpec, cleanupMessage: string): TrialResult {
  const now = new Date().toISOString();
  return {
    trial_name: spec.trialName,
    task_name: 'hello-world',
    dataset_name: 'tasks',
    agent_name: AGENT,
    agent: null,
    attempt: 1,
    rewards: { reward: 0 },
    error: null,
    agent_exit_code: 0,
    started_at: now,
    finished_at: now,
    steps: {},
    workflow_id: spec.trialId,
    job_name: 'scrub-job',
    task_dir: spec.taskDir,
    environment_type: 'docker',
    host: null,
    image: null,
    unenforced_limits: [],
    restarts: 0,
    collected: null,
    cleanup_errors: [{ step: 'stop', type: 'InfrastructureError', message: cleanupMessage, host: 'h1' }],
  };
}

describe('trial.log after collect: every line redacted, or none written', () => {
  let dir: string;
  const trial = async (trialName: string) => {
    const jobDir = path.join(dir, trialName.replace(/\W/g, '-'));
    await mkdir(path.join(jobDir, trialName, 'agent'), { recursive: true });
    await writeSignedJobFile(
      jobDir,
      'config.json',
      JSON.stringify({ name: 'scrub-job', agents: [{ name: AGENT, env: { AGENT_API_TOKEN: SECRET } }] })
    );
    const taskDir = path.join(REPO_ROOT, 'examples', 'tasks', 'hello-world');
    const spec = { jobDir, trialName, trialId: `scrub-job/${trialName}`, agentName: AGENT, taskDir } as TrialSpec;
    return { spec, trialDir: path.join(jobDir, trialName) };
  };

  before(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'rollout-trial-log-'));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('redacts a secret in lines logged after the scrub and in the cleanup errors the result step logs', async () => {
    const { spec, trialDir } = await trial('after-collect');
    await writeFile(path.join(trialDir, 'agent', 'out.txt'), `the agent printed ${SECRET}\n`);
    // Collect's scrub, then what later steps log: a stop error quoting the container, the result step's errors.
    assert.equal(await scrubTrialFolder(spec), 1);
    await log(spec, 'stop', `docker: container said ${SECRET} while stopping`);
    await writeTrialResult({ spec, result: trialResult(spec, `exit 1: ${SECRET}`) });

    const trialLog = await readFile(path.join(trialDir, 'trial.log'), 'utf8');
    assert.ok(!trialLog.includes(SECRET), trialLog);
    assert.match(trialLog, new RegExp(`\\[stop\\] docker: container said \\${REDACTED} while stopping`));
    assert.match(trialLog, new RegExp(`\\[stop\\] failed on h1: InfrastructureError: exit 1: \\${REDACTED}`));
    for (const file of ['result.json', 'agent/out.txt']) {
      const text = await readFile(path.join(trialDir, file), 'utf8');
      assert.ok(!text.includes(SECRET), `${file}: ${text}`);
    }
  });

  it('writes nothing and fails when the secrets cannot be worked out (config.json changed after signing)', async () => {
    const { spec, trialDir } = await trial('unreadable-secrets');
    await log(spec, 'start', 'environment started');
    const config = path.join(spec.jobDir, 'config.json');
    await writeFile(config, JSON.stringify({ name: 'scrub-job', agents: [{ name: AGENT, env: {} }] }));
    const later = new Date(Date.now() + 5_000);
    await utimes(config, later, later); // a new mtime: the worker's cached config is read again
    await assert.rejects(log(spec, 'stop', `container said ${SECRET}`), /config\.json/);
    await assert.rejects(writeTrialResult({ spec, result: trialResult(spec, `exit 1: ${SECRET}`) }), /config\.json/);

    const trialLog = await readFile(path.join(trialDir, 'trial.log'), 'utf8');
    assert.equal(trialLog.split('\n').filter(Boolean).length, 1, trialLog);
    assert.ok(!trialLog.includes(SECRET));
    await assert.rejects(readFile(path.join(trialDir, 'result.json')), { code: 'ENOENT' });
  });
});
