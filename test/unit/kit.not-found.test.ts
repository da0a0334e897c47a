/**
 * Not-found handling of the provider kit (src/environments/kit/not-found.ts): each provider says how its vendor
 * replies "not there" (`isNotFound`) and asks through the one shape (`ifFound`). Checked against the vendors' own error
 * classes, built here as their SDKs throw them, and against the errors that must not pass as "not there".
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { DaytonaError, DaytonaNotFoundError } from '@daytonaio/sdk';
import { ApiException } from '@kubernetes/client-node';
import { SandboxNotFoundError, TemplateError, TimeoutError } from 'e2b';
import { NotFoundError, ResourceExhaustedError } from 'modal';

import { ifFoundBy } from '../../src/environments/kit/not-found';
import * as daytona from '../../src/environments/daytona/client';
import * as docker from '../../src/environments/docker/engine';
import * as e2b from '../../src/environments/e2b/client';
import * as fly from '../../src/environments/fly/client';
import * as kubernetes from '../../src/environments/kubernetes/client';
import * as modal from '../../src/environments/modal/client';

/** A dockerode error as the engine's HTTP client makes it: the status on the error. */
function dockerError(statusCode: number): Error {
  return Object.assign(new Error(`(HTTP code ${statusCode}) unexpected`), { statusCode });
}

const providers = {
  docker: {
    provider: docker,
    absent: [dockerError(404)],
    other: [dockerError(409), dockerError(500), new Error('connect ECONNREFUSED')],
  },
  fly: {
    provider: fly,
    absent: [new fly.FlyApiError(404, 'machine not found', 'machine m1')],
    other: [new fly.FlyApiError(429, 'rate limit exceeded', 'listing'), new fly.FlyApiError(401, 'unauthorized', 'x')],
  },
  kubernetes: {
    provider: kubernetes,
    absent: [new ApiException(404, 'pods "p" not found', {}, {})],
    other: [new ApiException(409, 'already exists', {}, {}), new ApiException(403, 'forbidden', {}, {})],
  },
  daytona: {
    provider: daytona,
    absent: [new DaytonaNotFoundError('Sandbox not found', 404), new DaytonaError('gone', 404)],
    other: [new DaytonaError('Too many requests', 429), new DaytonaError('Internal', 500)],
  },
  modal: {
    provider: modal,
    absent: [new NotFoundError('Sandbox sb-1 not found')],
    other: [new ResourceExhaustedError('workspace at its limit'), new Error('UNAVAILABLE')],
  },
  e2b: {
    provider: e2b,
    absent: [new SandboxNotFoundError('sandbox x not found'), new TemplateError('404: tag not found')],
    other: [new TimeoutError('request timed out'), new TemplateError('500: internal error')],
  },
};

describe('ifFoundBy', () => {
  const ifFound = ifFoundBy((err) => err instanceof RangeError);

  it('passes the value through', async () => {
    assert.deepEqual(await ifFound(Promise.resolve({ state: 'started' })), { state: 'started' });
  });

  it('gives undefined for the vendor\'s "not there", and rethrows any other failure', async () => {
    assert.equal(await ifFound(Promise.reject(new RangeError('gone'))), undefined);
    await assert.rejects(ifFound(Promise.reject(new TypeError('broken'))), TypeError);
  });
});

describe('every provider reads "not there" through the kit', () => {
  for (const [name, { provider, absent, other }] of Object.entries(providers)) {
    it(`${name}: its vendor's not-found replies, and only those`, async () => {
      for (const err of absent) {
        assert.equal(provider.isNotFound(err), true, `${name}: ${err.message}`);
        assert.equal(await provider.ifFound(Promise.reject(err)), undefined);
      }
      for (const err of other) {
        assert.equal(provider.isNotFound(err), false, `${name}: ${err.message}`);
        await assert.rejects(provider.ifFound(Promise.reject(err)), (thrown) => thrown === err);
      }
    });
  }
});
