/**
 * The daytona provider through the shared cloud suite (test/support/cloud-suite.ts): on the stand-in of Daytona's
 * API (test/environments/daytona/daytona-stand-in.ts, NOT Daytona; its sandboxes are local Docker containers) in `npm test`, on
 * Daytona itself in `npm run test:cloud` (DAYTONA_API_KEY, and DAYTONA_API_URL / DAYTONA_TARGET if not the defaults).
 * Agents reach the worker's gateway through the relay, over Daytona's toolbox sessions.
 */
import { REAL_CLOUD, cloudSuite, realTarget, standInTarget } from '../../support/cloud-suite';
import { startDaytonaStandIn } from './daytona-stand-in';

cloudSuite({
  vendor: 'daytona',
  target: REAL_CLOUD ? realTarget() : standInTarget(startDaytonaStandIn),
  credential: 'DAYTONA_API_KEY',
});
