/**
 * The modal provider through the shared cloud suite (test/support/cloud-suite.ts): on the stand-in of Modal's API
 * (test/environments/modal/modal-stand-in.ts, NOT Modal; its sandboxes are local Docker containers, driven by Modal's unmodified
 * SDK) in `npm test`, on Modal itself in `npm run test:cloud` (MODAL_TOKEN_ID and MODAL_TOKEN_SECRET, or
 * ~/.modal.toml; ROLLOUT_TEST_MODAL_APP names the App, default rollout-test).
 */
import { REAL_CLOUD, cloudSuite, realTarget, standInTarget } from '../../support/cloud-suite';
import { startModalStandIn } from './modal-stand-in';

cloudSuite({
  vendor: 'modal',
  target: REAL_CLOUD
    ? realTarget({ app: process.env.ROLLOUT_TEST_MODAL_APP ?? 'rollout-test' })
    : standInTarget(() => startModalStandIn()),
  credential: 'MODAL_TOKEN_ID',
});
