/**
 * Job-file signatures (src/secrets/job-file-signature.ts) bind the job's location: a file signed for one job's folder
 * or bucket prefix does not verify in another's, even with the same job name and content.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { signJobFile, UnsignedJobFileError, verifyJobFile } from '../../src/secrets/job-file-signature';

const content = Buffer.from('{"name":"job"}');
const teamA = 's3://shared/team-a/job';
const teamB = 's3://shared/team-b/job';

function refusal(location: string, body: Buffer, signature: string | undefined): string | undefined {
  try {
    verifyJobFile('where', location, 'config.json', body, signature === undefined ? undefined : Buffer.from(signature));
    return undefined;
  } catch (err) {
    assert.ok(err instanceof UnsignedJobFileError);
    assert.equal(err.file, 'where');
    return err.reason;
  }
}

test('a signature verifies where it was made, for the content it was made for', () => {
  assert.equal(refusal(teamA, content, signJobFile(teamA, 'config.json', content)), undefined);
  assert.equal(
    refusal(teamA, Buffer.from('{"name":"other"}'), signJobFile(teamA, 'config.json', content)),
    'changed since it was signed: refused'
  );
});

test("another bucket prefix's signature is refused, naming the prefix it was signed for", () => {
  assert.match(
    refusal(teamB, content, signJobFile(teamA, 'config.json', content)) ?? '',
    /signed for another job's folder \("s3:\/\/shared\/team-a\/job"\)/
  );
});

test('a signature whose named folder was rewritten to this one does not verify', () => {
  const [version, key, digest] = signJobFile(teamA, 'config.json', content).trim().split(':');
  const forged = `${version}:${key}:${digest}:${Buffer.from(teamB).toString('base64url')}`;
  assert.equal(refusal(teamB, content, forged), 'changed since it was signed: refused');
});

test("another file's signature, and an older unbound one, are refused", () => {
  assert.equal(
    refusal(teamA, content, signJobFile(teamA, 'plan.jsonl', content)),
    'changed since it was signed: refused'
  );
  const [, key, digest] = signJobFile(teamA, 'config.json', content).trim().split(':');
  assert.match(
    refusal(teamA, content, `v1:${key}:${digest}`) ?? '',
    /^signed by an older Rollout, without its job folder/
  );
  assert.match(refusal(teamA, content, undefined) ?? '', /^not signed \(config\.json\.sig is missing\)/);
});
