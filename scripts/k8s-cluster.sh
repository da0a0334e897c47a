#!/usr/bin/env bash
# A real single-node Kubernetes on this host, for the kubernetes environment's tests: kube-apiserver,
# kube-controller-manager, kube-scheduler and kubelet built from the k8s.io/kubernetes Go module; etcd 3.5 and
# containerd 1.7 (CRI) extracted from Debian trixie's packages, the CNI plugins from bookworm's; a pause image built
# here. Nothing is installed and nothing of the host's is changed: a containerd of its own (own root, state and
# sockets; Docker's containerd is not touched), every port on 127.0.0.1 (the kubelet on its own bridge's address) but
# kube-apiserver's, no iptables rules, no kube-proxy, and a kubelet patched to leave the host's sysctls as they are
# (it only warns). kube-apiserver listens on every address (client certificates required, as kubeadm's does): with
# no kube-proxy, pods that use the API in-cluster (Rollout's workers) reach it at the node's address, given as
# KUBERNETES_SERVICE_HOST and _PORT.
#
#   scripts/k8s-cluster.sh build     builds once into $ROLLOUT_CACHE_DIR/kubernetes/<version>/ (minutes on 2 cores)
#   scripts/k8s-cluster.sh up        builds if needed, starts everything, waits for the node; prints
#                                    `export ROLLOUT_KUBERNETES_GATEWAY_HOST=…` and `export KUBECONFIG=…` last.
#                                    Idempotent.
#   scripts/k8s-cluster.sh down      deletes the pods, stops what `up` started (by PID), unmounts its mounts, removes
#                                    its bridge and its run state (the build and the PKI are kept)
#   scripts/k8s-cluster.sh status    what runs, where; exit 1 unless all of it runs
#   scripts/k8s-cluster.sh load <image>...  copies images of the local Docker engine into the running cluster
#
# Exit status 3: this machine cannot build the cluster (no Go, no Debian archive, not root); the reason is printed.
#
# Environment:
#   ROLLOUT_KUBERNETES_DIR        state folder (default $ROLLOUT_STATE_DIR/kubernetes or ~/.local/state/rollout/kubernetes)
#   ROLLOUT_KUBERNETES_API_PORT   kube-apiserver's port (default 16443)
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

# shellcheck source=k8s-cluster-build.sh
. "$(dirname "$0")/k8s-cluster-build.sh"

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

# shellcheck source=k8s-cluster-config.sh
. "$(dirname "$0")/k8s-cluster-config.sh"

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
  start kube-apiserver --etcd-servers="http://127.0.0.1:$etcd_port" --bind-address=0.0.0.0 --secure-port="$api_port" \
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
  # Images of the local Docker engine into the running cluster's containerd (what `up` does with its images).
  load)
    [ $# -ge 2 ] || die "usage: $0 load <image>..."
    images="${*:2}"
    import_images
    ;;
  *)
    echo "usage: $0 build|up|down|status|load <image>..." >&2
    exit 2
    ;;
esac
