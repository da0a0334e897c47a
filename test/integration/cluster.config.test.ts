/**
 * The production-style deployment (deploy/temporal/, scripts/temporal-cluster.sh, docker-compose.temporal.yml)
 * describes what Rollout uses: the same search attributes as the code, the same versions in both deployments.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, it } from 'node:test';

import { parse } from 'yaml';

import { ROLLOUT_SEARCH_ATTRIBUTES } from '../../workflows/search-attributes';
import { REPO_ROOT } from '../support/temporal';

const deploy = path.join(REPO_ROOT, 'deploy', 'temporal');
const clusterEnv = Object.fromEntries(
  readFileSync(path.join(deploy, 'cluster.env'), 'utf8')
    .split('\n')
    .filter((line) => /^\w+=/.test(line))
    .map((line) => line.split('=', 2) as [string, string])
);

describe('production-style Temporal deployment', () => {
  it('registers exactly the search attributes Rollout sets, with their types', () => {
    const listed = readFileSync(path.join(deploy, 'search-attributes.txt'), 'utf8')
      .split('\n')
      .filter((line) => line.trim() && !line.startsWith('#'))
      .map((line) => line.trim().split(/\s+/).join(' ').toLowerCase());
    const expected = ROLLOUT_SEARCH_ATTRIBUTES.map((key) => `${key.name} ${key.type}`.toLowerCase());
    assert.deepEqual(listed, expected);
  });

  it('gives docker-compose.temporal.yml the versions and configuration scripts/temporal-cluster.sh runs', () => {
    const compose = parse(readFileSync(path.join(REPO_ROOT, 'docker-compose.temporal.yml'), 'utf8')) as {
      services: Record<string, { image?: string; env_file?: string[]; volumes?: string[] }>;
    };
    const images = Object.values(compose.services).map((service) => service.image ?? '');
    assert.ok(images.includes(`postgres:${clusterEnv.POSTGRES_MAJOR}`), images.join(', '));
    assert.ok(images.includes(`temporalio/server:${clusterEnv.TEMPORAL_SERVER_VERSION}`), images.join(', '));
    assert.ok(
      images.some((image) => image.startsWith(`temporalio/admin-tools:${clusterEnv.TEMPORAL_SERVER_VERSION}`)),
      images.join(', ')
    );
    for (const name of ['temporal', 'temporal-schema', 'temporal-namespace']) {
      const service = compose.services[name];
      assert.ok(service, name);
      assert.ok(service.env_file?.includes('deploy/temporal/cluster.env'), `${name} reads cluster.env`);
      assert.ok(
        service.volumes?.some((volume) => volume.startsWith('./deploy/temporal:')),
        `${name} mounts deploy/temporal`
      );
    }
  });
});
