#!/usr/bin/env node
// `npm run test:k8s`: the kubernetes environment's tests against a real cluster. With KUBECONFIG set, the cluster it
// points at (namespace ROLLOUT_TEST_KUBERNETES_NAMESPACE, default "default"; built images pushed to
// ROLLOUT_TEST_KUBERNETES_REGISTRY, else to a registry the tests start on this host, which the cluster must reach).
// Without it, the single-node cluster of scripts/k8s-cluster.sh: built once, brought up here and down afterwards,
// with the host checked to be as before, while it ran and after (sysctls, iptables rules, no pod, mount, bridge or
// process of the cluster left). A machine that cannot build the cluster (no Go, no Debian archive, not root) runs
// nothing and says so: "not run" is never "passed".
'use strict';
const { spawn, spawnSync } = require('node:child_process');
const { readFileSync, readdirSync, readlinkSync } = require('node:fs');
const path = require('node:path');

const root = path.join(__dirname, '..');
const TESTS = ['environments.kubernetes', 'e2e.kubernetes', 'deploy.kubernetes'];
const SYSCTLS = ['vm/overcommit_memory', 'kernel/panic', 'kernel/panic_on_oops'];
/** iptables rules a cluster would add: its bridge, its pod network, kube-proxy's and CNI's chains. */
const CLUSTER_RULE = /rollout-k8s0|10\.244\.|KUBE-|CNI-/;
const CANNOT = 3; // scripts/k8s-cluster.sh: this machine cannot build or run the cluster

const seconds = (since) => `${((Date.now() - since) / 1000).toFixed(1)} s`;

/** What the cluster must leave as it found it (the Docker host is shared: only rules a cluster would add count). */
function hostState() {
  const iptables = spawnSync('iptables-save', { encoding: 'utf8' });
  const processes = readdirSync('/proc').filter((pid) => {
    try {
      return /^\d+$/.test(pid) && readlinkSync(`/proc/${pid}/exe`).includes('/rollout/kubernetes/');
    } catch {
      return false; // gone meanwhile, or a kernel thread
    }
  });
  return {
    sysctls: JSON.stringify(
      Object.fromEntries(
        SYSCTLS.map((name) => [name.replace('/', '.'), readFileSync(`/proc/sys/${name}`, 'utf8').trim()])
      )
    ),
    rules:
      iptables.status === 0
        ? iptables.stdout
            .split('\n')
            .filter((line) => CLUSTER_RULE.test(line))
            .join('\n')
        : 'iptables-save unavailable',
    bridge: spawnSync('ip', ['link', 'show', 'rollout-k8s0'], { stdio: 'ignore' }).status === 0,
    mounts: readFileSync('/proc/self/mounts', 'utf8')
      .split('\n')
      .filter((line) => line.includes('/rollout/kubernetes/')).length,
    processes: processes.length,
  };
}

/** scripts/k8s-cluster.sh <command>, its progress shown as it goes; resolves to its status, stdout and last line. */
function cluster(command) {
  return new Promise((resolve) => {
    const child = spawn('bash', [path.join(__dirname, 'k8s-cluster.sh'), command], {
      cwd: root,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let lastLine = '';
    child.stdout.on('data', (chunk) => (stdout += chunk));
    child.stderr.on('data', (chunk) => {
      process.stderr.write(chunk);
      lastLine = String(chunk).trim().split('\n').pop() || lastLine;
    });
    child.on('close', (status) => resolve({ status, stdout, lastLine }));
  });
}

/** Every pod of the cluster (the tests check their own jobs'; on the local cluster none at all may be left). */
async function podsLeft(kubeconfig) {
  const { CoreV1Api, KubeConfig } = require('@kubernetes/client-node');
  const config = new KubeConfig();
  config.loadFromFile(kubeconfig);
  const pods = await config.makeApiClient(CoreV1Api).listPodForAllNamespaces();
  return pods.items.map((pod) => `${pod.metadata.namespace}/${pod.metadata.name}`);
}

function report(checks) {
  for (const [what, ok] of checks) console.log(`${ok ? 'ok' : 'not ok'} - host: ${what}`);
  return checks.every(([, ok]) => ok);
}

async function main() {
  const env = { ...process.env, ROLLOUT_TEST_KUBERNETES: 'cluster' };
  const local = !process.env.KUBECONFIG;
  const before = local ? hostState() : null;
  // A cluster someone brought up before stays up afterwards.
  const wasUp = local && (await cluster('status')).status === 0;
  if (local) {
    const started = Date.now();
    const up = await cluster('up');
    if (up.status === CANNOT) {
      const reason = up.lastLine.replace(/^\[k8s-cluster\] cannot run here: /, '');
      console.log(`test:k8s: NOT RUN: no cluster (${reason}); nothing was tested`);
      return 0;
    }
    if (up.status !== 0) {
      console.error('test:k8s: scripts/k8s-cluster.sh up failed');
      return 1;
    }
    for (const [, name, value] of up.stdout.matchAll(/^export (\w+)=(.*)$/gm)) env[name] = value;
    console.log(`test:k8s: local cluster up in ${seconds(started)} (scripts/k8s-cluster.sh up, with its build if any)`);
  }

  const suite = Date.now();
  const run = spawnSync(process.execPath, [path.join(__dirname, 'run-tests.js'), ...TESTS], {
    cwd: root,
    stdio: 'inherit',
    env,
  });
  console.log(`test:k8s: suite ran in ${seconds(suite)}`);
  if (!local) return run.status === 0 ? 0 : 1;

  const left = await podsLeft(env.KUBECONFIG).catch((err) => [`(pods could not be listed: ${err.message})`]);
  const during = hostState();
  if (wasUp) {
    const clean = report([
      [`no pod left after the suite${left.length ? ` (left: ${left.join(', ')})` : ''}`, !left.length],
    ]);
    return run.status === 0 && clean ? 0 : 1;
  }
  const started = Date.now();
  const down = await cluster('down');
  console.log(`test:k8s: local cluster down in ${seconds(started)}`);
  const after = hostState();
  const clean = report([
    [`no pod left after the suite${left.length ? ` (left: ${left.join(', ')})` : ''}`, left.length === 0],
    [`sysctls while the cluster ran as before: ${during.sysctls}`, during.sysctls === before.sysctls],
    [`iptables: no rule of a cluster added while it ran`, during.rules === before.rules],
    ['scripts/k8s-cluster.sh down succeeded', down.status === 0],
    [`sysctls after as before: ${after.sysctls}`, after.sysctls === before.sysctls],
    ['no bridge rollout-k8s0 left', !after.bridge],
    ['no mount of the cluster left', after.mounts === 0],
    ['no process of the cluster left', after.processes === 0],
  ]);
  return run.status === 0 && clean ? 0 : 1;
}

main().then(
  (code) => process.exit(code),
  (err) => {
    console.error(err);
    process.exit(1);
  }
);
