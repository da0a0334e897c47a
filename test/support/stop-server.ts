/** Stops the tests' Temporal dev server (run by scripts/run-tests.js after the last test file). */
import { stopDevServer } from '../../src/temporal/dev-server';
import { TEST_SERVER } from './temporal';

stopDevServer(TEST_SERVER).catch((err: unknown) => {
  console.error(`could not stop the test Temporal server: ${String(err)}`);
});
