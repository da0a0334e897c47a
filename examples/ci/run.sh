#!/usr/bin/env bash
# The CI gate for a pull request: run the job, write JUnit XML and a static viewer site, and fail the build when the
# primary reward's mean falls under the threshold or any trial errors. Run it locally the same way:
#   bash examples/ci/run.sh [job.yaml] [threshold]
# Exit code: the job's (0 passed, 4 a threshold missed, 2 bad input, 3 infrastructure), after the artifacts exist.
set -uo pipefail
cd "$(dirname "$0")/../.."
job=${1:-examples/ci/job.yaml}
threshold=${2:-0.5}
out=${ROLLOUT_CI_OUT:-ci-results}
mkdir -p "$out"

npx rollout "$job" --fail-under "reward=$threshold" --max-errors 0 --junit "$out/junit.xml"
code=$?
# The bundle is written whatever the verdict: a failed gate is exactly when people want to look.
npx rollout view jobs --bundle "$out/site" || code=$((code == 0 ? 3 : code))
echo "artifacts: $out/junit.xml, $out/site/index.html (exit $code)"
exit "$code"
