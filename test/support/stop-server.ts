/** Stops the tests' Temporal server (run by scripts/run-tests.js before the first and after the last test file). */
import { stopDevServer } from '../../src/temporal/dev-server';
import { TEST_SERVER, TEST_SERVER_KIND, testCluster } from './temporal';

(TEST_SERVER_KIND === 'cluster' ? testCluster('down') : stopDevServer(TEST_SERVER)).catch((err: unknown) => {
  console.error(`could not stop the test Temporal server: ${String(err)}`);
});
