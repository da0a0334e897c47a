#!/usr/bin/env bash
# A production-style Temporal on this host, without Docker: a PostgreSQL instance of its own (Debian's package) and
# the Temporal server built from its Go module, configured by deploy/temporal/ (as docker-compose.temporal.yml is).
#
#   scripts/temporal-cluster.sh up                       idempotent; prints TEMPORAL_ADDRESS=<host:port> last
#   scripts/temporal-cluster.sh up --tls                 mTLS on the frontend (a CA, server and client certificates of
#                                                        its own, in <state>/tls); prints the TEMPORAL_* lines to export
#   scripts/temporal-cluster.sh up --auth [--tls]        TLS plus Temporal's JWT authorizer (a local key set); prints a
#                                                        TEMPORAL_API_KEY too. `up` in another mode restarts the server
#   scripts/temporal-cluster.sh down                     stops the server and PostgreSQL (data kept)
#   scripts/temporal-cluster.sh status                   what runs, where; exit 1 unless both run
#   scripts/temporal-cluster.sh stop temporal|postgres   stops one of them (as a crash would for the job; `up` restarts)
#
# Environment:
#   ROLLOUT_CLUSTER_PORT  frontend gRPC port (default 7233); PostgreSQL listens on this - 1, the other services on
#                         the next 10 ports (history, matching, worker, HTTP, membership, metrics)
#   ROLLOUT_CLUSTER_DIR   state folder (default $ROLLOUT_STATE_DIR/cluster or ~/.local/state/rollout/cluster)
#   ROLLOUT_CLUSTER_IP    address the services bind to (default 127.0.0.1; 0.0.0.0 for workers on other hosts)
#   ROLLOUT_CACHE_DIR     where the built server binaries are kept (default ~/.cache/rollout), per version
#   ROLLOUT_CLUSTER_TLS_SANS  more subjectAltName entries for the server certificate (e.g. DNS:temporal.example,
#                         IP:10.0.0.5); it always names localhost, 127.0.0.1 and this host's addresses
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
deploy=$repo/deploy/temporal
set -a
# shellcheck source=../deploy/temporal/cluster.env
. "$deploy/cluster.env"
set +a

port=${ROLLOUT_CLUSTER_PORT:-7233}
# The server records its membership ports in a PostgreSQL smallint column.
[ $((port + 11)) -le 32767 ] || { echo "[temporal-cluster] error: ROLLOUT_CLUSTER_PORT=$port: the ports up to $((port + 11)) must stay below 32768 (the server stores membership ports as smallint)" >&2; exit 1; }
ip=${ROLLOUT_CLUSTER_IP:-127.0.0.1}
dir=${ROLLOUT_CLUSTER_DIR:-${ROLLOUT_STATE_DIR:-${XDG_STATE_HOME:-$HOME/.local/state}/rollout}/cluster}
cache=${ROLLOUT_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rollout}/temporal-server/$TEMPORAL_SERVER_VERSION
pgbin=/usr/lib/postgresql/$POSTGRES_MAJOR/bin
client_ip=$([ "$ip" = 0.0.0.0 ] && echo 127.0.0.1 || echo "$ip")
address=$client_ip:$port

export POSTGRES_SEEDS=127.0.0.1 DB_PORT=$((port - 1)) BIND_ON_IP=$ip TEMPORAL_BROADCAST_ADDRESS=$client_ip \
  FRONTEND_GRPC_PORT=$port HISTORY_GRPC_PORT=$((port + 1)) MATCHING_GRPC_PORT=$((port + 2)) \
  WORKER_GRPC_PORT=$((port + 3)) FRONTEND_HTTP_PORT=$((port + 4)) FRONTEND_MEMBERSHIP_PORT=$((port + 5)) \
  HISTORY_MEMBERSHIP_PORT=$((port + 6)) MATCHING_MEMBERSHIP_PORT=$((port + 7)) WORKER_MEMBERSHIP_PORT=$((port + 8)) \
  PROMETHEUS_PORT=$((port + 9)) DYNAMIC_CONFIG_FILE_PATH=$deploy/dynamicconfig/rollout.yaml \
  SQL_TOOL=$cache/sql TEMPORAL_CLI=temporal TEMPORAL_ADDRESS=$address

# The script's own `temporal` calls use the mode's settings (set by use_mode), never the caller's.
unset TEMPORAL_API_KEY TEMPORAL_PROFILE TEMPORAL_CONFIG_FILE TEMPORAL_TLS TEMPORAL_TLS_SERVER_NAME \
  TEMPORAL_TLS_SERVER_CA_CERT_PATH TEMPORAL_TLS_CLIENT_CERT_PATH TEMPORAL_TLS_CLIENT_KEY_PATH \
  TEMPORAL_TLS_SERVER_CA_CERT_DATA TEMPORAL_TLS_CLIENT_CERT_DATA TEMPORAL_TLS_CLIENT_KEY_DATA
certs=$dir/tls
jwks_port=$((port + 13))
export INTERNAL_FRONTEND_GRPC_PORT=$((port + 10)) INTERNAL_FRONTEND_MEMBERSHIP_PORT=$((port + 11)) \
  INTERNAL_FRONTEND_HTTP_PORT=$((port + 12))

log() { echo "[temporal-cluster] $*" >&2; }
die() { echo "[temporal-cluster] error: $*" >&2; exit 1; }
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

ensure_postgres_package() {
  [ -x "$pgbin/pg_ctl" ] && return
  log "installing PostgreSQL $POSTGRES_MAJOR (Debian package)"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "postgresql-$POSTGRES_MAJOR" >/dev/null
}

# The package also creates the `postgres` user, so it comes first.
[ "${1:-}" != up ] || ensure_postgres_package
mkdir -p "$dir"
# PostgreSQL refuses to run as root: then it runs as the `postgres` user of Debian's package, in a data folder that
# user can reach (the state folder may sit under a home it cannot enter).
if [ "$(id -u)" -eq 0 ]; then
  as_db() { runuser -u postgres -- "$@"; }
  pgdata=$dir/postgres
  as_db test -x "$dir" 2>/dev/null || pgdata=/var/tmp/rollout-postgres-$DB_PORT
else
  as_db() { "$@"; }
  pgdata=$dir/postgres
fi

ensure_binaries() {
  [ -x "$cache/server" ] && [ -x "$cache/sql" ] && return
  command -v go >/dev/null 2>&1 || die "Go is needed to build the Temporal server once (install Go ≥ 1.21: https://go.dev/dl)"
  log "building Temporal server $TEMPORAL_SERVER_VERSION and its SQL tool with $(go version | cut -d' ' -f3) (once; minutes)"
  mkdir -p "$cache"
  local started=$SECONDS
  # GOTOOLCHAIN=auto: a Go older than the module's go line fetches the right toolchain from the module proxy.
  GOTOOLCHAIN=auto GOBIN=$cache go install "go.temporal.io/server/cmd/server@v$TEMPORAL_SERVER_VERSION" \
    "go.temporal.io/server/cmd/tools/sql@v$TEMPORAL_SERVER_VERSION"
  log "built in $((SECONDS - started)) s into $cache"
}


command -v temporal >/dev/null 2>&1 || die "the temporal CLI is missing: run scripts/setup.sh"

postgres_running() { as_db "$pgbin/pg_ctl" -D "$pgdata" status >/dev/null 2>&1; }

start_postgres() {
  if [ ! -f "$pgdata/PG_VERSION" ]; then
    log "initdb $pgdata"
    mkdir -p "$pgdata"
    [ "$(id -u)" -ne 0 ] || chown postgres: "$pgdata"
    chmod 700 "$pgdata"
    local pwfile
    pwfile=$(mktemp)
    echo "$POSTGRES_PWD" >"$pwfile"
    chmod 644 "$pwfile"
    as_db "$pgbin/initdb" -D "$pgdata" -U "$POSTGRES_USER" --pwfile="$pwfile" --auth=scram-sha-256 -E UTF8 \
      --locale=C.UTF-8 >/dev/null
    rm -f "$pwfile"
  fi
  postgres_running && return
  as_db "$pgbin/pg_ctl" -D "$pgdata" -l "$pgdata/postgres.log" -w -t 60 \
    -o "-p $DB_PORT -k $pgdata -c listen_addresses=127.0.0.1 -c max_connections=200" start >/dev/null
}

# --tls / --auth: plain, tls (mTLS), auth (TLS + JWT), tls+auth (mTLS + JWT)
parse_mode() {
  local tls=0 auth=0 arg
  for arg in "$@"; do
    case "$arg" in
      --tls) tls=1 ;;
      --auth) auth=1 ;;
      *) die "unknown option $arg (up takes --tls and --auth)" ;;
    esac
  done
  case $tls$auth in 00) echo plain ;; 10) echo tls ;; 01) echo auth ;; 11) echo tls+auth ;; esac
}

ensure_certs() {
  [ -f "$certs/client.crt" ] && return
  mkdir -p "$certs"
  chmod 700 "$certs"
  local sans="DNS:localhost,IP:127.0.0.1" a
  for a in $(hostname -I 2>/dev/null); do case "$a" in *:*) ;; *) sans="$sans,IP:$a" ;; esac; done
  [ -z "${ROLLOUT_CLUSTER_TLS_SANS:-}" ] || sans="$sans,$ROLLOUT_CLUSTER_TLS_SANS"
  (
    cd "$certs"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 -subj "/CN=rollout-temporal-ca" 2>/dev/null
    issue() { # name subject extendedKeyUsage [subjectAltName]
      openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
      printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=%s\n%s' "$3" \
        "${4:+subjectAltName=$4\n}" >"$1.ext"
      openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -out "$1.crt" -days 825 \
        -extfile "$1.ext" 2>/dev/null
      rm -f "$1.csr" "$1.ext"
    }
    issue server "/CN=localhost" serverAuth "$sans"
    issue client "/CN=rollout-client" clientAuth
    chmod 600 ./*.key
  ) || die "could not make the certificates in $certs (openssl)"
  log "certificates in $certs (server names: $sans)"
}

jwks_pid() {
  local pid
  pid=$(cat "$dir/jwks.pid" 2>/dev/null) || return 1
  kill -0 "$pid" 2>/dev/null && echo "$pid"
}

start_jwks() {
  jwks_pid >/dev/null && return
  setsid node "$repo/scripts/temporal-jwt.js" serve "$certs" 127.0.0.1 "$jwks_port" >>"$dir/jwks.log" 2>&1 </dev/null &
  echo $! >"$dir/jwks.pid"
  for _ in $(seq 1 50); do curl -sf "http://127.0.0.1:$jwks_port/jwks.json" >/dev/null && return; sleep 0.1; done
  die "the key set server did not answer on 127.0.0.1:$jwks_port; see $dir/jwks.log"
}

# The settings of a mode, for the server (SERVER_*) and for `temporal` calls here (TEMPORAL_*).
use_mode() {
  unset SERVER_TLS_DIR SERVER_JWKS_URL SERVER_TLS_REQUIRE_CLIENT_AUTH
  [ "$1" != plain ] || return 0
  export SERVER_TLS_DIR=$certs TEMPORAL_TLS_SERVER_CA_CERT_PATH=$certs/ca.crt TEMPORAL_TLS_SERVER_NAME=localhost
  case "$1" in
    *tls*) export SERVER_TLS_REQUIRE_CLIENT_AUTH=true TEMPORAL_TLS_CLIENT_CERT_PATH=$certs/client.crt \
      TEMPORAL_TLS_CLIENT_KEY_PATH=$certs/client.key ;;
    *) export SERVER_TLS_REQUIRE_CLIENT_AUTH=false ;;
  esac
  case "$1" in
    *auth*)
      export SERVER_JWKS_URL=http://127.0.0.1:$jwks_port/jwks.json
      node "$repo/scripts/temporal-jwt.js" keys "$certs"
      TEMPORAL_API_KEY=$(node "$repo/scripts/temporal-jwt.js" token "$certs" temporal-system:admin)
      export TEMPORAL_API_KEY
      ;;
  esac
}

server_pid() {
  local pid
  pid=$(cat "$dir/temporal.pid" 2>/dev/null) || return 1
  kill -0 "$pid" 2>/dev/null && echo "$pid"
}

start_server() {
  server_pid >/dev/null && return
  # Each start appends to the log, so a restart mid-job stays readable after the fact.
  local services=(frontend history matching worker)
  # With an authorizer, the system worker reaches the server through internal-frontend (no token needed there).
  [ -z "${SERVER_JWKS_URL:-}" ] || services+=(internal-frontend)
  setsid "$cache/server" --root / --config "$deploy/config" --env rollout --allow-no-auth start \
    "${services[@]/#/--service=}" \
    >>"$dir/temporal.log" 2>&1 </dev/null &
  echo $! >"$dir/temporal.pid"
  local deadline=$((SECONDS + 120))
  until temporal operator cluster health --address "$address" >/dev/null 2>&1; do
    server_pid >/dev/null || die "the Temporal server exited; see $dir/temporal.log"
    [ $SECONDS -lt $deadline ] || die "the Temporal server did not answer on $address within 120 s; see $dir/temporal.log"
    sleep 0.5
  done
}

stop_pid() {
  local pid=$1
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.2; done
  kill -KILL "$pid" 2>/dev/null || true
}

stop_server() {
  local pid
  if pid=$(server_pid); then stop_pid "$pid"; fi
  rm -f "$dir/temporal.pid"
  if pid=$(jwks_pid); then stop_pid "$pid"; fi
  rm -f "$dir/jwks.pid"
}

stop_postgres() {
  postgres_running || return 0
  as_db "$pgbin/pg_ctl" -D "$pgdata" -m fast -w stop >/dev/null
}

case "${1:-}" in
  build) ensure_binaries ;;
  up)
    mode=$(parse_mode "${@:2}")
    ensure_binaries
    [ "$mode" = plain ] || ensure_certs
    # A server running in another mode restarts in this one (same database).
    if server_pid >/dev/null && [ "$(cat "$dir/mode" 2>/dev/null || echo plain)" != "$mode" ]; then
      log "restarting the Temporal server: $(cat "$dir/mode" 2>/dev/null || echo plain) -> $mode"
      stop_server
    fi
    use_mode "$mode"
    [ "$mode" = plain ] || [ "$mode" = tls ] || start_jwks
    start_postgres
    "$deploy/setup.sh" schema >>"$dir/setup.log" 2>&1 || die "schema setup failed; see $dir/setup.log"
    echo "$mode" >"$dir/mode"
    start_server
    "$deploy/setup.sh" namespace >>"$dir/setup.log" 2>&1 || die "namespace setup failed; see $dir/setup.log"
    log "PostgreSQL $POSTGRES_MAJOR on 127.0.0.1:$DB_PORT ($pgdata), Temporal $TEMPORAL_SERVER_VERSION, $mode (log $dir/temporal.log)"
    echo "TEMPORAL_ADDRESS=$address"
    # The certificate names localhost: clients that reach the server by another address still verify it.
    [ "$mode" = plain ] || printf 'TEMPORAL_TLS_SERVER_CA_CERT_PATH=%s\nTEMPORAL_TLS_SERVER_NAME=localhost\n' "$certs/ca.crt"
    case "$mode" in *tls*)
      echo "TEMPORAL_TLS_CLIENT_CERT_PATH=$certs/client.crt"
      echo "TEMPORAL_TLS_CLIENT_KEY_PATH=$certs/client.key"
      ;;
    esac
    case "$mode" in *auth*)
      echo "TEMPORAL_API_KEY=$(node "$repo/scripts/temporal-jwt.js" token "$certs" "$TEMPORAL_NAMESPACE:admin")" ;;
    esac
    ;;
  down)
    stop_server
    stop_postgres
    ;;
  stop)
    case "${2:-}" in
      temporal) stop_server ;;
      postgres) stop_postgres ;;
      *) die "usage: $0 stop temporal|postgres" ;;
    esac
    ;;
  status)
    ok=0
    if postgres_running; then echo "postgres: running on 127.0.0.1:$DB_PORT ($pgdata)"; else echo "postgres: stopped"; ok=1; fi
    if pid=$(server_pid); then echo "temporal: running (pid $pid) on $address, $(cat "$dir/mode" 2>/dev/null || echo plain)"; else echo "temporal: stopped"; ok=1; fi
    echo "TEMPORAL_ADDRESS=$address"
    exit $ok
    ;;
  *)
    echo "usage: $0 build|up [--tls] [--auth]|down|status|stop temporal|postgres" >&2
    exit 2
    ;;
esac
