#!/usr/bin/env bash
# Builds the `rollout` image (the root Dockerfile) offline: no registry, from the local debian:bookworm-slim base
# image (scripts/setup.sh makes it), with this host's Node.js and npm and its CA bundle staged into .image/.
#
#   scripts/build-image.sh [tag]      default tag rollout:latest; prints the image's size and the build time last
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
tag=${1:-rollout:latest}
stage=$repo/.image
node=$(readlink -f "$(command -v node)")
npm_dir=$(dirname "$(dirname "$(readlink -f "$(command -v npm)")")")
major=$("$node" -p 'process.versions.node.split(".")[0]')
[ "$major" -ge 20 ] || { echo "[build-image] error: Node.js >= 20 is needed on this host (found $("$node" -v))" >&2; exit 1; }
docker image inspect debian:bookworm-slim >/dev/null 2>&1 || { echo "[build-image] error: no debian:bookworm-slim image: run scripts/setup.sh" >&2; exit 1; }
rm -rf "$stage"
mkdir -p "$stage"
cp -p "$node" "$stage/node"
cp -a "$npm_dir" "$stage/npm"
cp -pL /etc/ssl/certs/ca-certificates.crt "$stage/ca-certificates.crt"  # -p: unchanged files keep the build cache
started=$SECONDS
# DOCKER_BUILDKIT=0: the classic builder needs no Dockerfile frontend image (no registry here).
DOCKER_BUILDKIT=0 docker build -q -t "$tag" "$repo" >/dev/null
rm -rf "$stage"
echo "[build-image] $tag: $(docker image inspect "$tag" --format '{{.Size}}' | awk '{printf "%.0f MB", $1/1e6}') in $((SECONDS - started)) s"
