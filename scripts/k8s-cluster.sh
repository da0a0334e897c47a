#!/usr/bin/env bash
# A real single-node Kubernetes on this host, for the kubernetes environment's tests: kube-apiserver,
# kube-controller-manager, kube-scheduler and kubelet built from the k8s.io/kubernetes Go module; etcd 3.5 and
# containerd 1.7 (CRI) extracted from Debian trixie's packages, the CNI plugins from bookworm's; a pause image built
# here. Nothing is installed and nothing of the host's is changed: a containerd of its own (own root, state and
# sockets; Docker's containerd is not touched), every port on 127.0.0.1 (the kubelet on its own bridge's address), no
# iptables rules, no kube-proxy, and a kubelet patched to leave the host's sysctls as they are (it only warns).
#
#   scripts/k8s-cluster.sh build     builds once into $ROLLOUT_CACHE_DIR/kubernetes/<version>/ (minutes on 2 cores)
#   scripts/k8s-cluster.sh up        builds if needed, starts everything, waits for the node; prints
#                                    `export ROLLOUT_KUBERNETES_GATEWAY_HOST=…` and `export KUBECONFIG=…` last.
#                                    Idempotent.
#   scripts/k8s-cluster.sh down      deletes the pods, stops what `up` started (by PID), unmounts its mounts, removes
#                                    its bridge and its run state (the build and the PKI are kept)
#   scripts/k8s-cluster.sh status    what runs, where; exit 1 unless all of it runs
#
# Exit status 3: this machine cannot build the cluster (no Go, no Debian archive, not root); the reason is printed.
#
# Environment:
#   ROLLOUT_KUBERNETES_DIR        state folder (default $ROLLOUT_STATE_DIR/kubernetes or ~/.local/state/rollout/kubernetes)
#   ROLLOUT_KUBERNETES_API_PORT   kube-apiserver's port on 127.0.0.1 (default 16443)
#   ROLLOUT_KUBERNETES_IMAGES     images copied from the local Docker engine into the cluster at `up`
#                                 (default debian:bookworm-slim; pods use them with imagePullPolicy Never/IfNotPresent)
#   ROLLOUT_CACHE_DIR             where builds are kept (default ~/.cache/rollout)
set -euo pipefail

K8S_VERSION=v1.32.13 # ≥ 1.35 refuses cgroup v1 hosts by default; 1.32 matches Debian's containerd 1.7
STAGING_VERSION=v0${K8S_VERSION#v1}
cache=${ROLLOUT_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rollout}/kubernetes/$K8S_VERSION
dir=${ROLLOUT_KUBERNETES_DIR:-${ROLLOUT_STATE_DIR:-${XDG_STATE_HOME:-$HOME/.local/state}/rollout}/kubernetes}
api_port=${ROLLOUT_KUBERNETES_API_PORT:-16443}
images=${ROLLOUT_KUBERNETES_IMAGES:-debian:bookworm-slim}
run=$dir/run
pki=$dir/pki
conf=$dir/conf
bin=$cache/bin
debroot=$cache/root
# The node's address: the pod bridge's gateway. The kubelet refuses a loopback node IP and this kernel has no `dummy`
# links, so the bridge the CNI plugin attaches pods to is made first and carries it.
bridge=rollout-k8s0
node_ip=10.244.0.1
pod_cidr=10.244.0.0/24
node_name=rollout-node
etcd_port=$((api_port - 4064)) # 12379 by default; its peer and metrics ports the next two
ctr() { "$debroot/usr/bin/ctr" --address "$run/containerd/containerd.sock" -n k8s.io "$@"; }

log() { echo "[k8s-cluster] $*" >&2; }
die() { echo "[k8s-cluster] error: $*" >&2; exit 1; }
cannot() { echo "[k8s-cluster] cannot run here: $*" >&2; exit 3; }

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


# --- up -------------------------------------------------------------------------------------------------------------
# Host paths the kubelet and libcni hard-code: made by `up` when absent (recorded), removed again by `down`.
host_paths=(/var/lib/kubelet/device-plugins /var/lib/kubelet /var/lib/cni/results /var/lib/cni /var/log/containers)
components=(containerd etcd kube-apiserver kube-controller-manager kube-scheduler kubelet)
admin_kubeconfig() { echo "$pki/admin.kubeconfig"; }

# The PID of a component `up` started, if it still runs (and is that program: PIDs are reused).
pid_of() {
  local pid
  pid=$(cat "$run/$1.pid" 2>/dev/null) || return 1
  [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$(binary_of "$1")" ] && echo "$pid"
}

binary_of() {
  case $1 in
    containerd | etcd) echo "$debroot/usr/bin/$1" ;;
    *) echo "$bin/$1" ;;
  esac
}

start() {
  local name=$1
  shift
  pid_of "$name" >/dev/null && return
  # containerd finds its shim (containerd-shim-runc-v2) on PATH.
  PATH=$debroot/usr/bin:$PATH NO_PROXY=${NO_PROXY:+$NO_PROXY,}127.0.0.1,localhost,$node_ip \
    no_proxy=${no_proxy:+$no_proxy,}127.0.0.1,localhost,$node_ip \
    setsid "$(binary_of "$name")" "$@" >>"$dir/logs/$name.log" 2>&1 </dev/null &
  echo $! >"$run/$name.pid"
}

wait_until() { # what, seconds, command...
  local what=$1 seconds=$2 deadline
  shift 2
  deadline=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || die "$what not within $seconds s; see $dir/logs/"
    sleep 0.25
  done
}

# A CA, one certificate per component, the service-account key pair; kept across `up`s.
make_pki() {
  [ -f "$pki/complete" ] && return
  command -v openssl >/dev/null 2>&1 || cannot "openssl is needed to make the cluster's certificates"
  rm -rf "$pki" && mkdir -p "$pki" && cd "$pki"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 -subj /CN=rollout-kubernetes-ca 2>/dev/null
  certificate() { # name subject usage [subjectAltName]
    openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
    printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=%s\n%s' \
      "$3" "${4:+subjectAltName=$4}" >"$1.ext"
    openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -out "$1.crt" -days 3650 \
      -extfile "$1.ext" 2>/dev/null
    rm "$1.csr" "$1.ext"
  }
  certificate apiserver /CN=kube-apiserver serverAuth \
    "IP:127.0.0.1,IP:$node_ip,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
  certificate admin /O=system:masters/CN=rollout-admin clientAuth
  certificate apiserver-kubelet-client /O=system:masters/CN=kube-apiserver-kubelet-client clientAuth
  certificate controller-manager /CN=system:kube-controller-manager clientAuth
  certificate scheduler /CN=system:kube-scheduler clientAuth
  certificate kubelet "/O=system:nodes/CN=system:node:$node_name" clientAuth
  certificate kubelet-serving "/CN=$node_name" serverAuth "IP:$node_ip,DNS:$node_name,DNS:localhost"
  openssl genrsa -out service-accounts.key 2048 2>/dev/null
  openssl rsa -in service-accounts.key -pubout -out service-accounts.pub 2>/dev/null
  chmod 600 ./*.key
  touch complete
  cd - >/dev/null
}

kubeconfig() { # user → its kubeconfig on the API server's port
  local user=$1 file=$pki/$1.kubeconfig
  cat >"$file" <<YAML
apiVersion: v1
kind: Config
clusters:
- name: rollout-local
  cluster:
    server: https://127.0.0.1:$api_port
    certificate-authority-data: $(base64 -w0 "$pki/ca.crt")
users:
- name: $user
  user:
    client-certificate-data: $(base64 -w0 "$pki/$user.crt")
    client-key-data: $(base64 -w0 "$pki/$user.key")
contexts:
- name: rollout-local
  context: {cluster: rollout-local, user: $user}
current-context: rollout-local
YAML
  chmod 600 "$file"
}

write_configs() {
  mkdir -p "$conf/cni"
  cat >"$conf/containerd.toml" <<TOML
version = 2
root = "$dir/containerd"
state = "$run/containerd"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "$run/containerd/containerd.sock"
[ttrpc]
  address = "$run/containerd/containerd.sock.ttrpc"
[debug]
  address = "$run/containerd/debug.sock"
[metrics]
  address = ""
[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "$pause_image_name"
    disable_apparmor = true
    # Root here may lack CAP_SYS_RESOURCE: runc then fails every sandbox asking for oom_score_adj -998
    # ("can't get final child's PID from pipe"). Clamped to containerd's own.
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          BinaryName = "$runc"
          Root = "$run/runc"
          SystemdCgroup = false
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "$debroot/usr/lib/cni"
      conf_dir = "$conf/cni"
  [plugins."io.containerd.internal.v1.opt"]
    path = "$run/containerd/opt"
TOML
  # No IP masquerading, no port maps: the bridge plugin adds no iptables rules.
  cat >"$conf/cni/10-rollout.conflist" <<JSON
{"cniVersion": "1.0.0", "name": "rollout", "plugins": [
  {"type": "bridge", "bridge": "$bridge", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$pod_cidr"}]], "routes": [{"dst": "0.0.0.0/0"}],
            "dataDir": "$run/cni-ipam"}},
  {"type": "loopback"}]}
JSON
  cat >"$conf/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $node_ip
port: 10350
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10358
authentication: {anonymous: {enabled: false}, webhook: {enabled: false}, x509: {clientCAFile: $pki/ca.crt}}
authorization: {mode: AlwaysAllow}
tlsCertFile: $pki/kubelet-serving.crt
tlsPrivateKeyFile: $pki/kubelet-serving.key
cgroupDriver: cgroupfs
cgroupRoot: /rollout-kubernetes
containerRuntimeEndpoint: unix://$run/containerd/containerd.sock
podLogsDir: $run/pod-logs
failSwapOn: false
failCgroupV1: false
makeIPTablesUtilChains: false
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
serializeImagePulls: false
syncFrequency: 10s
nodeStatusUpdateFrequency: 5s
YAML
}

bridge_up() {
  ip link show "$bridge" >/dev/null 2>&1 && return
  if ip route show "$pod_cidr" | grep -q .; then die "$pod_cidr is already routed on this host: $(ip route show "$pod_cidr")"; fi
  ip link add "$bridge" type bridge
  ip addr add "$node_ip/24" dev "$bridge"
  ip link set "$bridge" up
}

# Images of the local Docker engine, copied into the cluster's containerd (again only when Docker's image changed).
import_images() {
  local image id record
  mkdir -p "$dir/imported"
  ctr images ls -q | grep -qx "$pause_image_name" || ctr images import "$cache/pause/pause-oci.tar" >/dev/null
  for image in $images; do
    id=$(docker image inspect -f '{{.Id}}' "$image" 2>/dev/null) || { log "no image $image in Docker: not copied"; continue; }
    record=$dir/imported/$(echo "$image" | tr '/:' '__')
    [ "$(cat "$record" 2>/dev/null)" = "$id" ] && ctr images ls -q | grep -qxF -e "$image" -e "docker.io/library/$image" &&
      continue
    docker save "$image" | ctr images import - >/dev/null
    echo "$id" >"$record"
  done
}

# The API as the admin (curl: no kubectl needed on the host).
api() {
  local path=$1
  shift
  curl -sf -A rollout-k8s-cluster --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" "$@" \
    "https://127.0.0.1:$api_port$path"
}

# Ready, and able to take pods: the default service account exists (pods are refused until it does).
node_ready() {
  api "/api/v1/nodes/$node_name" | grep -q '"type":"Ready","status":"True"' &&
    api /api/v1/namespaces/default/serviceaccounts/default >/dev/null
}

up() {
  [ "$(id -u)" -eq 0 ] || cannot "root is needed (a bridge, mounts and cgroups for the kubelet)"
  build
  local started=$SECONDS path
  mkdir -p "$run" "$dir/logs"
  for path in "${host_paths[@]}"; do [ -e "$path" ] || echo "$path" >>"$run/made-host-paths"; done
  make_pki
  for user in admin controller-manager scheduler kubelet; do kubeconfig "$user"; done
  write_configs
  bridge_up
  local hierarchy
  for hierarchy in /sys/fs/cgroup/*/; do # the kubelet's cgroup root must exist in every v1 hierarchy
    [ -e "$hierarchy/cgroup.procs" ] && mkdir -p "${hierarchy}rollout-kubernetes"
  done
  start containerd --config "$conf/containerd.toml"
  wait_until "containerd's socket" 30 ctr version
  import_images
  start etcd --name rollout --data-dir "$run/etcd" --unsafe-no-fsync \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$((etcd_port + 1))" --initial-advertise-peer-urls "http://127.0.0.1:$((etcd_port + 1))" \
    --initial-cluster "rollout=http://127.0.0.1:$((etcd_port + 1))" --listen-metrics-urls "http://127.0.0.1:$((etcd_port + 2))"
  start kube-apiserver --etcd-servers="http://127.0.0.1:$etcd_port" --bind-address=127.0.0.1 --secure-port="$api_port" \
    --advertise-address="$node_ip" --tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" \
    --client-ca-file="$pki/ca.crt" --kubelet-client-certificate="$pki/apiserver-kubelet-client.crt" \
    --kubelet-client-key="$pki/apiserver-kubelet-client.key" --kubelet-preferred-address-types=InternalIP \
    --kubelet-certificate-authority="$pki/ca.crt" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$pki/service-accounts.pub" --service-account-signing-key-file="$pki/service-accounts.key" \
    --service-cluster-ip-range=10.96.0.0/16 --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
    --endpoint-reconciler-type=none --profiling=false
  wait_until "the API server's readiness" 120 curl -sf --cacert "$pki/ca.crt" "https://127.0.0.1:$api_port/readyz"
  start kube-controller-manager --kubeconfig="$pki/controller-manager.kubeconfig" \
    --authentication-kubeconfig="$pki/controller-manager.kubeconfig" \
    --authorization-kubeconfig="$pki/controller-manager.kubeconfig" --bind-address=127.0.0.1 --secure-port=10357 \
    --leader-elect=false --use-service-account-credentials=true --service-account-private-key-file="$pki/service-accounts.key" \
    --root-ca-file="$pki/ca.crt" --cluster-signing-cert-file="$pki/ca.crt" --cluster-signing-key-file="$pki/ca.key" \
    --controllers='*,-bootstrapsigner,-tokencleaner,-cloud-node-lifecycle,-service-lb-controller,-node-route-controller'
  start kube-scheduler --kubeconfig="$pki/scheduler.kubeconfig" --authentication-kubeconfig="$pki/scheduler.kubeconfig" \
    --authorization-kubeconfig="$pki/scheduler.kubeconfig" --bind-address=127.0.0.1 --secure-port=10359 --leader-elect=false
  start kubelet --config="$conf/kubelet.yaml" --kubeconfig="$pki/kubelet.kubeconfig" --root-dir="$run/kubelet" \
    --cert-dir="$run/kubelet-pki" --hostname-override="$node_name" --node-ip="$node_ip" --v=1
  wait_until "the node's readiness" 120 node_ready
  log "Kubernetes $K8S_VERSION up in $((SECONDS - started)) s: API https://127.0.0.1:$api_port, node $node_name ($node_ip), logs $dir/logs/"
  # Pods reach this host (a worker's model gateway) at the node's address.
  echo "export ROLLOUT_KUBERNETES_GATEWAY_HOST=$node_ip"
  echo "export KUBECONFIG=$(admin_kubeconfig)"
}

# --- down -----------------------------------------------------------------------------------------------------------
stop() {
  local pid
  pid=$(pid_of "$1") || { rm -f "$run/$1.pid"; return 0; }
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$run/$1.pid"
}

down() {
  [ -d "$run" ] || { ip link delete "$bridge" 2>/dev/null || true; return 0; }
  [ "$(id -u)" -eq 0 ] || cannot "root is needed to stop the cluster"
  # The kubelet tears its pods down itself (network, mounts, cgroups) while it and the API server run.
  if pid_of kube-apiserver >/dev/null && pid_of kubelet >/dev/null; then
    local namespace
    for namespace in $(api /api/v1/pods | grep -o '"namespace":"[^"]*"' | sort -u | cut -d'"' -f4); do
      api "/api/v1/namespaces/$namespace/pods?gracePeriodSeconds=0" -X DELETE -o /dev/null ||
        log "could not delete the pods of namespace $namespace through the API; their containers are killed below"
    done
    for _ in $(seq 1 80); do [ -z "$(ctr tasks ls -q 2>/dev/null)" ] && break; sleep 0.25; done
  fi
  stop kube-scheduler
  stop kube-controller-manager
  stop kubelet
  local task
  if pid_of containerd >/dev/null; then
    for task in $(ctr tasks ls -q 2>/dev/null); do
      ctr tasks kill -s KILL "$task" 2>/dev/null || true
      for _ in $(seq 1 20); do ctr tasks delete "$task" >/dev/null 2>&1 && break; sleep 0.25; done
    done
    for task in $(ctr containers ls -q 2>/dev/null); do ctr containers delete "$task" >/dev/null 2>&1 || true; done
  fi
  stop containerd
  stop kube-apiserver
  stop etcd
  # Its mounts only (network namespaces, pod volumes, overlay snapshots), deepest first. Never /run/containerd/s:
  # shims hard-code it, Docker's among them.
  local mount
  for mount in $(awk -v run="$run" -v root="$dir/containerd" 'index($2, run) == 1 || index($2, root) == 1 {print $2}' /proc/self/mounts | sort -r); do
    umount -l "$mount" || log "could not unmount $mount"
  done
  ip link delete "$bridge" 2>/dev/null || true
  # The kubelet's cgroups, under a root of its own in every hierarchy (empty once its pods are gone).
  local cgroup
  for cgroup in /sys/fs/cgroup/*/rollout-kubernetes; do
    [ -d "$cgroup" ] && { find "$cgroup" -depth -type d -exec rmdir {} + || log "could not remove $cgroup"; }
  done
  local path
  while read -r path; do rm -rf "$path"; done < <(cat "$run/made-host-paths" 2>/dev/null)
  if awk -v run="$run" 'index($2, run) == 1 {found = 1} END {exit !found}' /proc/self/mounts; then
    die "mounts are left under $run (kept, not deleted): $(awk -v run="$run" 'index($2, run) == 1 {print $2}' /proc/self/mounts)"
  fi
  rm -rf "$run"
}

# --- status ---------------------------------------------------------------------------------------------------------
status() {
  local ok=0 name pid
  built && echo "build: $cache" || { echo "build: none (scripts/k8s-cluster.sh build)"; ok=1; }
  for name in "${components[@]}"; do
    if pid=$(pid_of "$name"); then echo "$name: running (pid $pid)"; else echo "$name: stopped"; ok=1; fi
  done
  if [ $ok -eq 0 ] && node_ready; then echo "node $node_name: Ready"; else echo "node $node_name: not ready"; ok=1; fi
  echo "export KUBECONFIG=$(admin_kubeconfig)"
  exit $ok
}

runc=${ROLLOUT_KUBERNETES_RUNC:-$(command -v runc || echo /usr/sbin/runc)}

case "${1:-}" in
  build) build ;;
  up) up ;;
  down) down ;;
  status) status ;;
  *)
    echo "usage: $0 build|up|down|status" >&2
    exit 2
    ;;
esac
