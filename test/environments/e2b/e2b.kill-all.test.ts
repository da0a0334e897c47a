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

import { E2B_KILL_ALL, E2B_SETTLE, E2B_SETTLED_MARK } from '../../../src/environments/e2b/kill-all';

const name = `rollout-e2b-kill-all-${randomBytes(3).toString('hex')}`;
const booted = `${name}-booted`;
const docker = (...args: string[]) => execFileSync('docker', args, { encoding: 'utf8' });
const inside = (script: string, container = name) => docker('exec', '-u', 'root', container, '/bin/sh', '-c', script);
const running = (container = name) =>
  inside('cat /proc/[0-9]*/comm 2>/dev/null | sort', container).split('\n').filter(Boolean);

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

describe("e2b kill of all: the sandbox's services that started after envd", () => {
  before(() => {
    // As an E2B boot lays processes out: envd first (envd.service.tpl: as early as possible), then the services
    // (a copy of sleep named chronyd); then Rollout settles the sandbox (E2B_SETTLE, then the mark as envd's child:
    // here a `docker exec`, PPid 0, as the stand-in's envd starts commands).
    docker('run', '-d', '--init', '--name', booted, 'debian:bookworm-slim', 'sleep', 'infinity');
    inside('cp /bin/sleep /usr/bin/envd && (/usr/bin/envd infinity >/dev/null 2>&1 &)', booted);
    inside('sleep 1; cp /bin/sleep /usr/sbin/chronyd && (setsid /usr/sbin/chronyd infinity >/dev/null 2>&1 &)', booted);
    inside(E2B_SETTLE, booted);
    docker('exec', '-d', '-u', 'root', booted, '/bin/sh', '-c', E2B_SETTLED_MARK);
    inside('sleep 1', booted);
    // The agent's: a daemon, and a mark of its own (its parent is not envd).
    inside('cp /bin/sleep /tmp/sleeper && (setsid /tmp/sleeper 901 >/dev/null 2>&1 &)', booted);
    inside('(setsid /run/rollout/rollout-settled 902 >/dev/null 2>&1 &); sleep 1', booted);
  });
  after(() => {
    docker('rm', '-f', booted);
  });

  it("spares the services, envd and the mark; kills the agent's daemon and its forged mark", () => {
    const seen = running(booted);
    assert.equal(seen.filter((c) => c === 'rollout-settled').length, 2, seen.join(' '));
    inside(E2B_KILL_ALL, booted);
    const left = running(booted);
    assert.ok(left.includes('envd') && left.includes('chronyd'), `envd and the service survive: ${left.join(' ')}`);
    assert.equal(left.filter((c) => c === 'rollout-settled').length, 1, `only Rollout's mark: ${left.join(' ')}`);
    assert.ok(!left.includes('sleeper'), `the agent's daemon is gone: ${left.join(' ')}`);
  });

  it('without the mark (the agent killed it), only what started before envd is spared', () => {
    inside(
      'for d in /proc/[0-9]*; do read -r c < $d/comm; [ "$c" = rollout-settled ] && kill -9 ${d#/proc/}; done; true',
      booted
    );
    inside('(setsid /run/rollout/rollout-settled 903 >/dev/null 2>&1 &); sleep 1', booted);
    inside(E2B_KILL_ALL, booted);
    const left = running(booted);
    assert.ok(left.includes('envd'), `envd survives: ${left.join(' ')}`);
    assert.ok(!left.includes('chronyd') && !left.includes('rollout-settled'), `the line is envd's: ${left.join(' ')}`);
  });
});
