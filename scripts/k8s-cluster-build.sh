# Sourced by scripts/k8s-cluster.sh: `build`, once per version into $cache (its variables are the caller's).
# Kubernetes from the k8s.io/kubernetes Go module, etcd/containerd/CNI extracted from Debian's packages, a pause image.

go_bin() {
  if command -v go >/dev/null 2>&1; then command -v go; elif [ -x /usr/local/go/bin/go ]; then echo /usr/local/go/bin/go; fi
}

built() { [ -f "$cache/complete" ]; }

# --- build ----------------------------------------------------------------------------------------------------------
build() {
  built && return
  local go
  go=$(go_bin)
  [ -n "$go" ] || cannot "no Go toolchain to build Kubernetes $K8S_VERSION with (install Go ≥ 1.23: https://go.dev/dl)"
  command -v apt-get >/dev/null 2>&1 && command -v dpkg-deb >/dev/null 2>&1 ||
    cannot "no apt-get/dpkg-deb to fetch etcd, containerd and the CNI plugins from Debian's archive"
  local work started=$SECONDS
  work=$(mktemp -d "${TMPDIR:-/tmp}/rollout-k8s-build.XXXXXX")
  # No Go caches are kept: modules (~600 MiB) and the build cache (~3 GiB) live and die in $work.
  # shellcheck disable=SC2064
  trap "chmod -R u+w '$work' 2>/dev/null; rm -rf '$work'" EXIT
  export GOPATH=$work/gopath GOMODCACHE=$work/gopath/pkg/mod GOCACHE=$work/gocache GOWORK=off \
    GOFLAGS="-buildvcs=false -mod=mod" CGO_ENABLED=0 GOTOOLCHAIN=auto
  rm -rf "$cache.partial"
  mkdir -p "$cache.partial/bin" "$cache.partial/root" "$cache.partial/pause"
  fetch_debs "$work" "$cache.partial/root"
  log "building Kubernetes $K8S_VERSION with $($go version | cut -d' ' -f3) (once; about 5 minutes on 2 cores)"
  kubernetes_source "$go" "$work/src"
  local ldflags="-s -w" pkg
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags="$ldflags -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitTreeState=clean"
    ldflags="$ldflags -X $pkg.gitMinor=$(echo "$K8S_VERSION" | cut -d. -f2)"
  done
  (cd "$work/src" && nice -n 19 "$go" build -trimpath -ldflags "$ldflags" -o "$cache.partial/bin/" \
    ./cmd/kube-apiserver ./cmd/kube-controller-manager ./cmd/kube-scheduler ./cmd/kubelet)
  pause_image "$go" "$work/pause" "$cache.partial/pause"
  rm -rf "$cache"
  mv "$cache.partial" "$cache"
  touch "$cache/complete"
  chmod -R u+w "$work" && rm -rf "$work" # now, not at exit: `up` goes on after a build
  trap - EXIT
  log "built in $((SECONDS - started)) s into $cache ($(du -sh "$cache" | cut -f1))"
}

# etcd 3.5 and containerd 1.7 from trixie (their binaries run on bookworm's glibc; bookworm has etcd 3.4 and
# containerd 1.6), the bridge/host-local/loopback CNI plugins from bookworm. Extracted, not installed. runc is the
# host's (trixie's needs glibc 2.38).
fetch_debs() {
  local work=$1 into=$2 deb
  mkdir -p "$work/debs"
  (cd "$work/debs" && apt-get download -q etcd-server/trixie containerd/trixie containernetworking-plugins/bookworm \
    >/dev/null 2>"$work/apt.log") ||
    cannot "apt-get download of etcd-server/trixie, containerd/trixie, containernetworking-plugins failed (Debian's trixie archive must be an apt source, as scripts/setup.sh adds it): $(tail -1 "$work/apt.log")"
  for deb in "$work"/debs/*.deb; do
    dpkg-deb -x "$deb" "$into"
    dpkg-deb -f "$deb" Package Version | paste -sd' ' >>"$into/PACKAGES"
  done
}

# The module zip has no ./staging tree, which its go.mod points the k8s.io/* modules at: point them at the published
# modules instead (the proxy here refuses a few versions with 403: those take the previous patch release; the sample
# modules only tests use are dropped).
kubernetes_source() {
  local go=$1 src=$2 from module version
  from=$(cd "$(dirname "$src")" && "$go" mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  [ -n "$from" ] || die "go mod download k8s.io/kubernetes@$K8S_VERSION gave no source folder"
  cp -r "$from" "$src"
  chmod -R u+w "$src"
  cd "$src"
  rm -rf vendor go.work go.work.sum
  for module in $(sed -n 's/^\t\(k8s.io\/[a-z0-9-]*\) => \.\/staging\/.*/\1/p' go.mod); do
    case $module in
      k8s.io/sample-*) "$go" mod edit -dropreplace "$module" -droprequire "$module" ;;
      *)
        version=$STAGING_VERSION
        if ! "$go" mod download "$module@$version" 2>/dev/null; then
          version=$("$go" list -m -versions "$module" | tr ' ' '\n' | grep -E "^${STAGING_VERSION%.*}\.[0-9]+$" |
            sort -V | awk -v want="$STAGING_VERSION" '$0 == want {exit} {previous = $0} END {print previous}')
          [ -n "$version" ] || die "the module proxy has no $module $STAGING_VERSION nor an earlier patch release"
          "$go" mod download "$module@$version"
          log "$module: $STAGING_VERSION is not on the module proxy; using $version"
        fi
        "$go" mod edit -replace "$module=$module@$version"
        ;;
    esac
  done
  # The kubelet sets vm.overcommit_memory, kernel.panic and kernel.panic_on_oops on the host unless told to refuse
  # to start instead (protectKernelDefaults). On a shared host it must do neither: it warns.
  sed -i 's/^\tb := KernelTunableModify$/\tb := KernelTunableWarn/' pkg/kubelet/cm/container_manager_linux.go
  grep -q '^	b := KernelTunableWarn$' pkg/kubelet/cm/container_manager_linux.go ||
    die "the kubelet's kernel-tunables line moved in $K8S_VERSION; adapt the patch in $0"
  cd - >/dev/null
}

# The sandbox ("pause") image, with no registry: a static binary that waits for SIGTERM and reaps orphans, as an OCI
# image archive `ctr images import` reads.
pause_image() {
  local go=$1 work=$2 into=$3
  mkdir -p "$work/layout/blobs/sha256" "$work/rootfs"
  cat >"$work/main.go" <<'GO'
// pause: PID 1 of every pod sandbox. Waits for SIGINT/SIGTERM, reaping orphaned children meanwhile.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range signals {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var status syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
GO
  printf 'module pause\n\ngo 1.22\n' >"$work/go.mod"
  (cd "$work" && "$go" build -trimpath -ldflags "-s -w" -o rootfs/pause .)
  blob() { # file → its digest's hex, stored as a blob
    local hex
    hex=$(sha256sum "$1" | cut -d' ' -f1)
    cp "$1" "$work/layout/blobs/sha256/$hex"
    echo "$hex"
  }
  size() { stat -c %s "$1"; }
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$work/rootfs" -cf "$work/layer.tar" pause
  local layer config manifest
  layer=$(blob "$work/layer.tar")
  printf '{"architecture":"amd64","os":"linux","config":{"Entrypoint":["/pause"],"User":"65535:65535"},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
    "$layer" >"$work/config.json"
  config=$(blob "$work/config.json")
  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:%s","size":%s}]}' \
    "$config" "$(size "$work/config.json")" "$layer" "$(size "$work/layer.tar")" >"$work/manifest.json"
  manifest=$(blob "$work/manifest.json")
  printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"annotations":{"io.containerd.image.name":"%s"}}]}' \
    "$manifest" "$(size "$work/manifest.json")" "$pause_image_name" >"$work/layout/index.json"
  printf '{"imageLayoutVersion":"1.0.0"}' >"$work/layout/oci-layout"
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$work/layout" -cf "$into/pause-oci.tar" .
}
pause_image_name=rollout.local/pause:1
