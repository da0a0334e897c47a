/**
 * The fly provider through the shared cloud suite (test/support/cloud-suite.ts): on the stand-in of Fly's Machines
 * API (test/environments/fly/fly-stand-in.ts, NOT Fly; its machines are local Docker containers) in `npm test`, on Fly itself
 * in `npm run test:cloud` (FLY_API_TOKEN, ROLLOUT_TEST_FLY_APP; the worker's Docker logged in to registry.fly.io,
 * and ROLLOUT_GATEWAY_PUBLIC_URL reachable from Fly for the agent test). Fly's exec has no streamed process: agents
 * reach the gateway at its public URL.
 */
import { REAL_CLOUD, cloudSuite, realTarget, standInTarget } from '../../support/cloud-suite';
import { startFlyStandIn } from './fly-stand-in';

cloudSuite({
  vendor: 'fly',
  target: REAL_CLOUD ? realTarget({ app: process.env.ROLLOUT_TEST_FLY_APP }) : standInTarget(startFlyStandIn),
  publicGateway: true,
  credential: 'FLY_API_TOKEN',
  // Shared guests have at most 8 CPUs, and at most 2048 MB per CPU (see src/environments/fly/guest.ts).
  sizes: {
    refused: { cpus: '16' },
    field: 'environment.cpus',
    rounded: { cpus: '1', memory: '4G' },
    roundedTo: /rounded up to 2 CPU, 4096 MiB/,
  },
});
