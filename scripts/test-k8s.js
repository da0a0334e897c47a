#!/usr/bin/env node
// `npm run test:k8s`: the kubernetes environment's tests against a real cluster. With KUBECONFIG set, the cluster it
// points at (namespace ROLLOUT_TEST_KUBERNETES_NAMESPACE, default "default"; built images pushed to
// ROLLOUT_TEST_KUBERNETES_REGISTRY, else to a registry the tests start on this host, which the cluster must reach).
// Without it, the single-node cluster of scripts/k8s-cluster.sh: built once, brought up here and down afterwards,
// with the host checked to be as before (sysctls, iptables rules, no mount, bridge or process of the cluster left).
// A machine that cannot build the cluster (no Go, no Debian archive) runs nothing and says so: "not run" is never
// "passed".
'use strict';
const { spawnSync } = require('node:child_process');
const { readFileSync, readdirSync, readlinkSync } = require('node:fs');
const path = require('node:path');

const root = path.join(__dirname, '..');
const clusterScript = path.join(__dirname, 'k8s-cluster.sh');
const TESTS = ['environments.kubernetes', 'e2e.kubernetes'];
const SYSCTLS = ['vm/overcommit_memory', 'kernel/panic', 'kernel/panic_on_oops'];

const seconds = (since) => `${((Date.now() - since) / 1000).toFixed(1)} s`;

/** What the cluster must leave as it found it. */
function hostState() {
  const sysctls = Object.fromEntries(
    SYSCTLS.map((name) => [name.replace('/', '.'), readFileSync(`/proc/sys/${name}`, 'utf8').trim()])
  );
  const iptables = spawnSync('iptables-save', { encoding: 'utf8' });
  // Counters and the generator's timestamps change on their own: the rules are what counts.
  const rules = iptables.status === 0 ? iptables.stdout.split('\n').filter((line) => /^[-:*]/.test(line)) : null;
  const links = spawnSync('ip', ['-o', 'link', 'show'], { encoding: 'utf8' }).stdout.split('\n');
  const mounts = readFileSync('/proc/self/mounts', 'utf8').split('\n');
  const processes = readdirSync('/proc').filter((pid) => {
    try {
      return /^\d+$/.test(pid) && readlinkSync(`/proc/${pid}/exe`).includes('/rollout/kubernetes/');
    } catch {
      return false; // gone meanwhile, or a kernel thread
    }
  });
  return {
    sysctls,
    iptables: rules?.map((line) => line.replace(/\[\d+:\d+\]/, '')).join('\n') ?? 'iptables-save unavailable',
    bridge: links.some((line) => /: rollout-k8s0[:@]/.test(line)),
    mounts: mounts.filter((line) => line.includes('/rollout/kubernetes/')).length,
    processes: processes.length,
  };
}

function cluster(command) {
  const result = spawnSync('bash', [clusterScript, command], {
    cwd: root,
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  process.stderr.write(result.stderr);
  return result;
}

const env = { ...process.env, ROLLOUT_TEST_KUBERNETES: 'cluster' };
let before = null;
if (!process.env.KUBECONFIG) {
  before = hostState();
  const started = Date.now();
  const up = cluster('up');
  if (up.status === 3) {
    const reason = up.stderr
      .trim()
      .split('\n')
      .pop()
      .replace(/^\[k8s-cluster\] cannot run here: /, '');
    console.log(`test:k8s: NOT RUN: no cluster (${reason}); nothing was tested`);
    process.exit(0);
  }
  if (up.status !== 0) {
    console.error('test:k8s: scripts/k8s-cluster.sh up failed');
    process.exit(1);
  }
  for (const [, name, value] of up.stdout.matchAll(/^export (\w+)=(.*)$/gm)) env[name] = value;
  console.log(`test:k8s: local cluster up in ${seconds(started)} (scripts/k8s-cluster.sh up, build included if any)`);
}

const suite = Date.now();
const run = spawnSync(process.execPath, [path.join(__dirname, 'run-tests.js'), ...TESTS], {
  cwd: root,
  stdio: 'inherit',
  env,
});
console.log(`test:k8s: suite ran in ${seconds(suite)}`);
let failed = run.status !== 0;

/** Pods of the local cluster the suite left (the suite's own tests check their jobs'; this checks all of them). */
async function podsLeft() {
  const { CoreV1Api, KubeConfig } = require('@kubernetes/client-node');
  const config = new KubeConfig();
  config.loadFromFile(env.KUBECONFIG);
  const pods = await config.makeApiClient(CoreV1Api).listPodForAllNamespaces();
  return pods.items.map((pod) => `${pod.metadata.namespace}/${pod.metadata.name}`);
}

async function main() {
  if (!before) return;
  const left = await podsLeft().catch((err) => [`(pods could not be listed: ${err.message})`]);
  const started = Date.now();
  const down = cluster('down');
  console.log(`test:k8s: local cluster down in ${seconds(started)}`);
  const after = hostState();
  const checks = [
    [`no pod left after the suite${left.length ? ` (left: ${left.join(', ')})` : ''}`, left.length === 0],
    ['scripts/k8s-cluster.sh down succeeded', down.status === 0],
    [
      `host sysctls as before (${JSON.stringify(before.sysctls)})`,
      JSON.stringify(after.sysctls) === JSON.stringify(before.sysctls),
    ],
    ['iptables rules as before', after.iptables === before.iptables],
    ['no bridge rollout-k8s0 left', !after.bridge],
    ['no mount of the cluster left', after.mounts === 0],
    ['no process of the cluster left', after.processes === 0],
  ];
  for (const [what, ok] of checks) console.log(`${ok ? 'ok' : 'not ok'} - host: ${what}`);
  if (JSON.stringify(after.sysctls) !== JSON.stringify(before.sysctls)) {
    console.log(`# sysctls after: ${JSON.stringify(after.sysctls)}`);
  }
  failed ||= checks.some(([, ok]) => !ok);
}

main().then(
  () => process.exit(failed ? 1 : 0),
  (err) => {
    console.error(err);
    process.exit(1);
  }
);
