#!/usr/bin/env bash
# Rollout's Dockerfile frontend: BuildKit's own Dockerfile frontend 1.4.3 (heredocs: `RUN <<EOF`, `COPY <<EOF`), built
# from the Go module proxy into a local image. Docker 20.10's built-in frontend lacks heredocs, and `# syntax=` would
# pull docker/dockerfile from a registry; the engine's BuildKit takes a frontend image that is on the host instead
# (BUILDKIT_SYNTAX, which also overrides a Dockerfile's `# syntax=` line). Nothing of the host's dockerd changes.
# Idempotent: the binary is cached, and nothing is done when the image is there.
set -euo pipefail

BUILDKIT_VERSION=v0.10.6 # the BuildKit release whose frontend is docker/dockerfile:1.4.3
IMAGE=${ROLLOUT_DOCKERFILE_FRONTEND:-rollout-dockerfile-frontend:1.4.3}
log() { echo "[setup] $*"; }

if docker image inspect "$IMAGE" >/dev/null 2>&1; then
  log "Dockerfile frontend $IMAGE present"
  exit 0
fi
if ! command -v go >/dev/null 2>&1; then
  log "warning: no Go toolchain, so no $IMAGE: Dockerfiles with heredocs will fail to build (install Go, run again)"
  exit 0
fi
cache=${XDG_CACHE_HOME:-$HOME/.cache}/rollout/dockerfile-frontend-$BUILDKIT_VERSION
if [ ! -x "$cache/dockerfile-frontend" ]; then
  log "building BuildKit's Dockerfile frontend $BUILDKIT_VERSION from the Go module proxy (a few minutes, once)"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  source=$(cd "$work" && go mod download -json "github.com/moby/buildkit@$BUILDKIT_VERSION" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  cp -r "$source" "$work/src"
  chmod -R u+w "$work/src"
  rm -rf "$work/src/vendor" # the module zip keeps only vendor/modules.txt
  (cd "$work/src" && CGO_ENABLED=0 go build -mod=mod -trimpath -ldflags "-s -w" \
    -tags "netgo static_build osusergo" -o "$work/dockerfile-frontend" ./frontend/dockerfile/cmd/dockerfile-frontend)
  mkdir -p "$cache"
  mv "$work/dockerfile-frontend" "$cache/dockerfile-frontend"
fi
context=$(mktemp -d)
cp "$cache/dockerfile-frontend" "$context/"
printf '%s\n' 'FROM scratch' 'COPY dockerfile-frontend /bin/dockerfile-frontend' \
  'LABEL moby.buildkit.frontend.network.none="true"' 'ENTRYPOINT ["/bin/dockerfile-frontend"]' >"$context/Dockerfile"
docker buildx build --load --quiet --tag "$IMAGE" "$context" >/dev/null
rm -rf "$context"
log "Dockerfile frontend $IMAGE built (Dockerfile heredocs)"
