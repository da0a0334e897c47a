/**
 * job.yaml `services`: real processes started, waited for, logged and stopped (with their whole process group).
 */
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import { JobConfigSchema } from '../../src/job/checks';
import type { ServiceConfig } from '../../src/contracts/job-config';
import { ServiceStartError, startServices } from '../../src/job/services';
import { alive } from '../support/private-dockerd';
import { waitFor } from '../support/wait';

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

const service = (fields: Partial<ServiceConfig> & { command: string }): ServiceConfig => ({
  name: 'svc',
  ready_timeout_sec: 30,
  ...fields,
});

describe('job services', () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'rollout-services-'));
  });
  after(() => rm(dir, { recursive: true, force: true }));

  it('starts a service in its folder, waits until its ready_url answers, logs its output, stops its process group', async () => {
    const port = await freePort();
    const server = `require('http').createServer((q, r) => r.end(process.cwd())).listen(${port}, '127.0.0.1')`;
    const services = await startServices(
      [
        service({
          name: 'web',
          cwd: dir,
          // A child of the shell, which must go down with it; the delay proves the job waits for readiness.
          command: `echo starting; sleep 60 & echo "child $!" > child.pid; sleep 1; exec node -e "${server}"`,
          ready_url: `http://127.0.0.1:\${WEB_PORT:-${port}}/`,
        }),
      ],
      path.join(dir, 'logs')
    );
    const answer = await fetch(`http://127.0.0.1:${port}/`).then((r) => r.text());
    assert.equal(answer, dir);
    const child = Number((await readFile(path.join(dir, 'child.pid'), 'utf8')).split(' ')[1]);
    assert.ok(alive(child));
    await services.stop();
    await assert.rejects(fetch(`http://127.0.0.1:${port}/`));
    await waitFor('the service’s child process to end with it', () => !alive(child), 10_000);
    assert.match(await readFile(path.join(dir, 'logs', 'web.log'), 'utf8'), /^starting\n/);
  });

  it('a service that exits before it is ready fails the start, with its output, and the others are stopped', async () => {
    const port = await freePort();
    const first = `exec node -e "require('http').createServer((q, r) => r.end()).listen(${port}, '127.0.0.1')"`;
    await assert.rejects(
      startServices(
        [
          service({ name: 'first', cwd: dir, command: first, ready_url: `http://127.0.0.1:${port}/` }),
          service({
            name: 'broken',
            cwd: dir,
            command: 'echo "no model weights here" >&2; exit 3',
            ready_url: 'http://127.0.0.1:9/',
          }),
        ],
        path.join(dir, 'logs')
      ),
      (err: unknown) =>
        err instanceof ServiceStartError &&
        /service broken exited 3 before http:\/\/127\.0\.0\.1:9\/ answered/.test(err.message) &&
        /no model weights here/.test(err.message)
    );
    await assert.rejects(fetch(`http://127.0.0.1:${port}/`), 'the first service was left running');
  });

  it("the error's first line says what the service printed: the line naming its error, or that it printed nothing", async () => {
    const first = (err: unknown) => (err instanceof ServiceStartError ? err.message.split('\n')[0]! : '');
    const failing = (command: string) =>
      startServices(
        [service({ name: 'model', cwd: dir, command, ready_url: 'http://127.0.0.1:9/' })],
        path.join(dir, 'l')
      );
    const silent = await failing('exit 4').then(() => '', first);
    assert.match(
      silent,
      /^service model exited 4 before http:\/\/127\.0\.0\.1:9\/ answered: it printed nothing \(.*model\.log\)$/
    );
    // A program Rollout does not have where the job file says: node's error line, not its last line (its version).
    const missing = await failing('exec node ./no-such-server.js').then(() => '', first);
    assert.match(missing, /answered: Error: Cannot find module '.*no-such-server\.js' \(its output: .*model\.log\)$/);
  });

  it("a service's command sees ROLLOUT_PACKAGE_DIR, the Rollout package running it (a job file copied elsewhere)", async () => {
    const port = await freePort();
    const server = `require('http').createServer((q, r) => r.end(process.env.ROLLOUT_PACKAGE_DIR)).listen(${port}, '127.0.0.1')`;
    const services = await startServices(
      [
        service({
          name: 'shipped',
          cwd: dir,
          command: `test -f "$ROLLOUT_PACKAGE_DIR/package.json" && exec node -e "${server}"`,
          ready_url: `http://127.0.0.1:${port}/`,
        }),
      ],
      path.join(dir, 'logs')
    );
    try {
      const packageDir = await fetch(`http://127.0.0.1:${port}/`).then((r) => r.text());
      const manifest = JSON.parse(await readFile(path.join(packageDir, 'package.json'), 'utf8')) as { name: string };
      assert.equal(manifest.name, 'rollout-agents');
    } finally {
      await services.stop();
    }
  });

  it('a service that never answers fails the start after ready_timeout_sec, and is stopped', async () => {
    await assert.rejects(
      startServices(
        [
          service({
            name: 'silent',
            cwd: dir,
            command: 'echo $$ > silent.pid; exec sleep 60',
            ready_url: 'http://127.0.0.1:9/',
            ready_timeout_sec: 1,
          }),
        ],
        path.join(dir, 'logs')
      ),
      /service silent: http:\/\/127\.0\.0\.1:9\/ did not answer within 1 s/
    );
    const pid = Number(await readFile(path.join(dir, 'silent.pid'), 'utf8'));
    await waitFor('the silent service to be stopped', () => !alive(pid), 10_000);
  });

  it('job.yaml: service names are unique', () => {
    const job = {
      agents: [{ name: 'oracle' }],
      datasets: [{ path: 'tasks' }],
      services: [
        { name: 'model', command: 'true' },
        { name: 'model', command: 'true' },
      ],
    };
    const parsed = JobConfigSchema.safeParse(job);
    assert.equal(parsed.success, false);
    assert.match(JSON.stringify(parsed.error?.issues), /duplicate service \\"model\\"/);
  });
});
