#!/usr/bin/env bash
# What only the tests need, after scripts/setup.sh (which `npm test`, `npm run test:cluster` and `npm run test:k8s`
# run first), idempotently, each part timed: Chromium (the viewer's browser tests), two Python venvs (.venv-test:
# Eval Protocol's client; .venv-harbor: Harbor's ATIF validator), an image registry for the kubernetes tests, MinIO for
# the object-store tests, and
# the Dockerfile frontend ahead of the tests whose Dockerfiles use heredocs (jobs build it when they first need it).
set -euo pipefail
cd "$(dirname "$0")/.."
SETUP_NAME=setup-tests
source scripts/setup-lib.sh

chromium_browser() {
  if ! command -v chromium >/dev/null 2>&1; then
    log "installing chromium (apt)"
    apt_install chromium
  fi
  log "$(chromium --version 2>/dev/null || echo 'chromium present')"
}

# Eval Protocol's client: the tests drive `rollout serve` with it. Its installed version is asked, not imported
# (importing it takes seconds).
eval_protocol_venv() {
  if ! .venv-test/bin/python -c 'import importlib.metadata as m; m.version("eval-protocol")' >/dev/null 2>&1; then
    log "installing eval-protocol into .venv-test (pip)"
    python3 -m venv .venv-test
    .venv-test/bin/pip install -q eval-protocol
  fi
  log ".venv-test has eval-protocol"
}

# Harbor's ATIF validator: the tests check Rollout's trajectories with it. harbor 0.25 declares Python >= 3.12 for
# the whole framework; its trajectory models and validator, all the tests use, need only pydantic and run on Debian
# bookworm's 3.11.
harbor_venv() {
  if ! .venv-harbor/bin/python -c 'import harbor.utils.trajectory_validator' >/dev/null 2>&1; then
    log "installing harbor's trajectory validator into .venv-harbor (pip)"
    python3 -m venv .venv-harbor
    .venv-harbor/bin/pip install -q 'pydantic>=2.12'
    .venv-harbor/bin/pip install -q --no-deps --ignore-requires-python harbor==0.25.0
  fi
  log ".venv-harbor has harbor's trajectory validator"
}

# A Go program built once from the Go module proxy into the host cache (cached per version):
# go_binary <what> <binary path> <module@version> <what fails without it>.
go_binary() {
  local what="$1" bin="$2" module="$3" without="$4"
  if [ ! -x "$bin" ]; then
    if command -v go >/dev/null 2>&1 || [ -x /usr/local/go/bin/go ]; then
      log "building $what (go install, once)"
      mkdir -p "$(dirname "$bin")"
      GOBIN="$(dirname "$bin")" GOTOOLCHAIN=auto PATH="$PATH:/usr/local/go/bin" go install "$module" ||
        log "warning: $what did not build; $without"
    else
      log "no Go toolchain: $without (it needs $what)"
    fi
  fi
  [ -x "$bin" ] && log "$what built"
  return 0
}

ROLLOUT_CACHE="${ROLLOUT_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rollout}"

# The image registry (CNCF distribution) for the kubernetes environment's tests: no container registry is reachable
# here, so the tests push to one of their own. Without Go (>= 1.21) those tests print "not run".
REGISTRY_VERSION=v3.0.0
image_registry() {
  go_binary "the image registry $REGISTRY_VERSION" "$ROLLOUT_CACHE/registry/$REGISTRY_VERSION/registry" \
    "github.com/distribution/distribution/v3/cmd/registry@$REGISTRY_VERSION" "the kubernetes e2e tests will print 'not run'"
}

# A real S3-compatible server (MinIO) for the tests of jobs in an object store (test/e2e/e2e.storage.test.ts) and
# `npm run bench -- storage`; several minutes to build. The module proxy serves MinIO's RELEASE.* tags (not semantic
# versions) only as the pseudo-version of a commit, so the version here is one; test/support/minio.ts names the same.
MINIO_VERSION=v0.0.0-20260212201848-7aac2a2c5b7c
minio_server() {
  go_binary "MinIO $MINIO_VERSION" "$ROLLOUT_CACHE/minio/$MINIO_VERSION/minio" "github.com/minio/minio@$MINIO_VERSION" \
    "test/e2e.storage will fail saying so"
}

# The same code a worker runs when a job's Dockerfile first needs it (src/environments/image-builder/dockerfile-frontend.ts).
dockerfile_frontend() {
  node -e "require('./dist/src/environments/image-builder/dockerfile-frontend').prepareDockerfileFrontend()" ||
    log "warning: no Dockerfile frontend; the tests of Dockerfile heredocs will build it (or fail saying why)"
}

# `setup-tests.sh image-registry`: that part alone (what `npm run stand-in -- fly` needs, built on its first run).
if [ "${1:-}" = image-registry ]; then
  part "image registry" image_registry
  summary
  exit 0
fi
part chromium chromium_browser
part ".venv-test" eval_protocol_venv
part ".venv-harbor" harbor_venv
part "image registry" image_registry
part "MinIO" minio_server
part "Dockerfile frontend" dockerfile_frontend
summary
