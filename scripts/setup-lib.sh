# Helpers shared by scripts/setup.sh (what `npm start` needs) and scripts/setup-tests.sh (what only the tests need).
# Each part of a set-up is timed: `part <label> <function>` runs the function, says what it installed (or that
# nothing was missing) and how long it took; `summary` prints every part's time at the end.

SETUP_NAME=${SETUP_NAME:-setup}
log() { echo "[$SETUP_NAME] $*"; }
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

apt_updated=0
apt_install() {
  if [ "$apt_updated" -eq 0 ]; then $SUDO apt-get update -qq; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$@" >/dev/null
}

debian_mirror() {
  local mirror
  mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  echo "${mirror:-http://deb.debian.org/debian}"
}

now_ms() { date +%s%3N; }
SETUP_STARTED=$(now_ms)
SETUP_TIMES=()

# part <label> <function>: the function prints what it installs with `log`; the time is recorded either way.
part() {
  local label=$1 started elapsed
  shift
  started=$(now_ms)
  "$@"
  elapsed=$(($(now_ms) - started))
  SETUP_TIMES+=("$label $(seconds "$elapsed")")
}

seconds() { printf '%d.%01d s' $(($1 / 1000)) $((($1 % 1000) / 100)); }

summary() {
  local joined
  joined=$(printf '%s, ' "${SETUP_TIMES[@]}")
  log "done in $(seconds $(($(now_ms) - SETUP_STARTED))): ${joined%, }"
}
