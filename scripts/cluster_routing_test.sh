#!/usr/bin/env bash
# ctest cluster_routing: scripts/cluster_routing_check.py against a cluster of 3 demo-model
# replicas (scripts/cluster.sh) in a folder of its own on free ports, stopped afterwards.
# Exit 77 (skip) without haproxy or PostgreSQL's server binaries.
#   scripts/cluster_routing_test.sh BINARY
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
command -v haproxy >/dev/null || { echo "skipped: haproxy is not installed (scripts/setup.sh installs it)"; exit 77; }
dir=$(mktemp -d /tmp/inferscale-routing-XXXXXX)
chmod 755 "$dir"
# Five free ports in a row: HAProxy, 3 replicas, PostgreSQL.
base=$(python3 "$ROOT/scripts/free_ports.py" 5)
export INFERSCALE_BIN=$BIN INFERSCALE_CLUSTER_DIR=$dir INFERSCALE_PORT=$base INFERSCALE_PG_PORT=$((base + 4))
unset INFERSCALE_STORE
trap '"$ROOT/scripts/cluster.sh" down; rm -rf "$dir"' EXIT
rc=0
"$ROOT/scripts/private_postgres.sh" url "$dir" >/dev/null || rc=$?
[ "$rc" = 77 ] && exit 77
"$ROOT/scripts/cluster.sh" up 3 --model demo
python3 "$ROOT/scripts/cluster_routing_check.py" --url "http://127.0.0.1:$base" --cluster-dir "$dir"
