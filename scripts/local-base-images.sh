#!/usr/bin/env bash
# Local STAND-INS for public base images that real tasks (Harbor's examples, Terminal-Bench) start FROM, for machines
# with no container registry. Each is built from the local debian:bookworm-slim and Debian packages, and tagged with
# the public name so a task's Dockerfile builds unchanged. They are NOT the real images: ubuntu:24.04 here is Debian
# 12, python:3.12-slim has Debian's Python 3.11, alpine:3.21 is Debian without apk. A tag that already exists on this host (a real image) is never
# replaced. Everything built here carries the label rollout.stand-in=<public name>, so it can be listed and removed:
#   docker images --filter label=rollout.stand-in
#   docker rmi $(docker images -q --filter label=rollout.stand-in)
# Usage: scripts/local-base-images.sh [image ...]   (default: all of them)
set -euo pipefail

BASE=debian:bookworm-slim
ALL=(ubuntu:24.04 ubuntu:22.04 python:3.12-slim python:3.13-slim python:3.12 alpine:3.21)
images=("$@")
[ ${#images[@]} -gt 0 ] || images=("${ALL[@]}")

docker image inspect "$BASE" >/dev/null 2>&1 || {
  echo "error: $BASE is not on this host (scripts/setup.sh imports it)" >&2
  exit 2
}

context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
# The host's CA certificates (TLS from containers passes an intercepting proxy): apt, pip and curl in the stand-ins
# trust what the host trusts.
mkdir -p "$context/ca"
cp /usr/local/share/ca-certificates/*.crt "$context/ca/" 2>/dev/null || true

for image in "${images[@]}"; do
  if docker image inspect "$image" >/dev/null 2>&1; then
    if [ -z "$(docker image inspect -f '{{index .Config.Labels "rollout.stand-in"}}' "$image")" ]; then
      echo "[base-images] $image exists (a real image): left as it is"
    else
      echo "[base-images] $image: stand-in already built"
    fi
    continue
  fi
  case "$image" in
    ubuntu:*) packages="ca-certificates" ;;
    # Only for tasks that use alpine as a plain shell (a sidecar that sleeps): there is no apk.
    alpine:*) packages="ca-certificates" ;;
    # python:*-slim puts python, python3, pip and venv on PATH.
    python:*) packages="ca-certificates python3 python3-pip python3-venv python-is-python3" ;;
    *)
      echo "error: no stand-in recipe for $image" >&2
      exit 2
      ;;
  esac
  cat >"$context/Dockerfile" <<EOF
FROM $BASE
COPY ca/ /usr/local/share/ca-certificates/
RUN apt-get update && apt-get install -y --no-install-recommends $packages \\
    && update-ca-certificates && rm -rf /var/lib/apt/lists/*
# python images allow pip installs into the system interpreter; Debian's marks it externally managed.
RUN rm -f /usr/lib/python3*/EXTERNALLY-MANAGED
LABEL rollout.stand-in="$image"
EOF
  echo "[base-images] building stand-in $image from $BASE ($packages)"
  docker buildx build --load --progress=plain --tag "$image" "$context" >"$context/build.log" 2>&1 || {
    tail -20 "$context/build.log" >&2
    exit 1
  }
done
