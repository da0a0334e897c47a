#!/bin/sh
# Prepares a Temporal server on PostgreSQL for Rollout, idempotently. Shared by scripts/temporal-cluster.sh (this
# host) and docker-compose.temporal.yml (the admin-tools image), so both deploy the same schema and attributes.
#
#   setup.sh schema     create the databases, install and migrate the Temporal and visibility schemas (server down)
#   setup.sh namespace  create the namespace with its retention and register Rollout's search attributes (server up)
#
# Environment: the values of cluster.env, plus POSTGRES_SEEDS, DB_PORT (schema), TEMPORAL_ADDRESS (namespace), and
# SQL_TOOL / TEMPORAL_CLI when the tools have other names than in the admin-tools image.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
SQL_TOOL=${SQL_TOOL:-temporal-sql-tool}
TEMPORAL_CLI=${TEMPORAL_CLI:-temporal}

schema() {
  for db in "$DBNAME:temporal" "$VISIBILITY_DBNAME:visibility"; do
    name=${db%%:*}
    kind=${db##*:}
    sql() {
      "$SQL_TOOL" --plugin postgres12 --ep "$POSTGRES_SEEDS" -p "$DB_PORT" -u "$POSTGRES_USER" --pw "$POSTGRES_PWD" \
        --db "$name" "$@"
    }
    # create-database fails when the database exists; a migrated one answers update-schema with nothing to do.
    if ! sql update-schema --schema-name "postgresql/v12/$kind" >/dev/null 2>&1; then
      sql create-database >/dev/null 2>&1 || true
      sql setup-schema -v 0.0
      sql update-schema --schema-name "postgresql/v12/$kind"
    fi
  done
}

namespace() {
  # A server still (re)connecting to its database answers both calls with errors ("no usable database connection
  # found") for a few seconds: retried, and the last answer is shown if it never comes.
  tries=0
  until "$TEMPORAL_CLI" operator namespace describe --namespace "$TEMPORAL_NAMESPACE" >/dev/null 2>&1 ||
    out=$("$TEMPORAL_CLI" operator namespace create --namespace "$TEMPORAL_NAMESPACE" \
      --retention "$TEMPORAL_NAMESPACE_RETENTION" 2>&1) ||
    case "$out" in *"already exists"*) true ;; *) false ;; esac; do
    tries=$((tries + 1))
    [ "$tries" -lt 60 ] || { echo "$out" >&2; exit 1; }
    sleep 1
  done
  # The server's services learn of a new namespace through a cache refreshed every few seconds.
  tries=0
  until existing=$("$TEMPORAL_CLI" operator search-attribute list --namespace "$TEMPORAL_NAMESPACE" -o json); do
    tries=$((tries + 1))
    [ "$tries" -lt 60 ] || exit 1
    sleep 1
  done
  grep -v '^#' "$here/search-attributes.txt" | while read -r name type; do
    [ -n "$name" ] || continue
    case "$existing" in *"\"$name\""*) continue ;; esac
    "$TEMPORAL_CLI" operator search-attribute create --namespace "$TEMPORAL_NAMESPACE" --name "$name" --type "$type"
  done
}

case "${1:-}" in
  schema) schema ;;
  namespace) namespace ;;
  *) echo "usage: $0 schema|namespace" >&2; exit 2 ;;
esac
