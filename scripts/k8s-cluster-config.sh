# Sourced by scripts/k8s-cluster.sh: the cluster's certificates, kubeconfigs and component configurations, written
# into its state folder by `up` (its variables are the caller's).

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
