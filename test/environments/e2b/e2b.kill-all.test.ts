/**
 * E2B's kill of all (src/environments/e2b/kill-all.ts) on a real process table, a Docker container laid out as an E2B
 * sandbox after envd's live upgrade: envd running as `envd.next` (e2b-dev/infra envd/internal/services/process/
 * upgrade.go: DefaultUpgradeBinPath, exec in place), a process the agent named `envd` later, and the agent's daemons.
 * envd survives under its upgraded name; what the agent started goes, the fake envd included.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';

import { E2B_KILL_ALL } from '../../../src/environments/e2b/kill-all';

const name = `rollout-e2b-kill-all-${randomBytes(3).toString('hex')}`;
const docker = (...args: string[]) => execFileSync('docker', args, { encoding: 'utf8' });
const inside = (script: string) => docker('exec', '-u', 'root', name, '/bin/sh', '-c', script);
const running = () => inside('cat /proc/[0-9]*/comm 2>/dev/null | sort').split('\n').filter(Boolean);

describe('e2b kill of all: envd under its upgraded name', () => {
  before(() => {
    // An init as PID 1 that reaps (as systemd does), a process started before envd (a service), then envd.next (a copy
    // of sleep under that name) as early as envd starts on an E2B boot.
    docker('run', '-d', '--init', '--name', name, 'debian:bookworm-slim', 'sleep', 'infinity');
    inside('cp /bin/sleep /usr/bin/envd.next && (/usr/bin/envd.next infinity >/dev/null 2>&1 &)');
    inside('sleep 1');
    // Later, the agent's: a daemon, a process it named envd, and another daemon after that.
    inside('cp /bin/sleep /tmp/sleeper && (setsid /tmp/sleeper 901 >/dev/null 2>&1 &)');
    inside('sleep 1; cp /bin/sleep /tmp/envd && (/tmp/envd 902 >/dev/null 2>&1 &)');
    inside('sleep 1; (setsid /tmp/sleeper 903 >/dev/null 2>&1 &)');
  });
  after(() => {
    docker('rm', '-f', name);
  });

  it('spares envd.next and kills every process the agent started, one named envd included', () => {
    const seen = running();
    assert.ok(seen.includes('envd.next') && seen.includes('envd') && seen.includes('sleeper'), seen.join(' '));
    inside(E2B_KILL_ALL);
    const left = running();
    assert.ok(left.includes('envd.next'), `envd survives: ${left.join(' ')}`);
    assert.ok(!left.includes('sleeper') && !left.includes('envd'), `the agent's processes are gone: ${left.join(' ')}`);
    assert.ok(left.includes('docker-init') && left.includes('sleep'), 'PID 1 and what started before envd survive');
  });
});
