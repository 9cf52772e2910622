#!/usr/bin/env bash
# InferScale as N replicas behind HAProxy on one machine, with a private PostgreSQL 15 as their
# shared store.
#
#   scripts/cluster.sh up N [serve args...]   start PostgreSQL, N replicas, HAProxy; returns once all answer
#   scripts/cluster.sh down                   stop HAProxy, the replicas, PostgreSQL (nothing is left running)
#   scripts/cluster.sh status                 what runs; exit 0 when everything is up and healthy
#
# Clients use http://127.0.0.1:$INFERSCALE_PORT (default 8000), HAProxy, which routes by
# deploy/haproxy/inferscale.cfg (a user's requests go to one replica). Replica i (1..N) listens on
# 127.0.0.1:$((INFERSCALE_PORT + i)) and is started as `inferscale serve` with the default model
# of scripts/serve_defaults.sh (what scripts/run.sh serves) unless the serve args name one, and
# --store postgresql://postgres@127.0.0.1:$INFERSCALE_PG_PORT/inferscale. On a machine whose
# `nvidia-smi -L` lists GPUs, replica i gets CUDA_VISIBLE_DEVICES=i-1 (modulo the GPU count); on
# one without, each replica gets --threads nproc/N unless the serve args set --threads.
#
# Environment:
#   INFERSCALE_CLUSTER_DIR   the cluster's folder: logs, pid files, PostgreSQL's data (default ./cluster)
#   INFERSCALE_PORT          HAProxy's port; the replicas take the N ports after it (default 8000)
#   INFERSCALE_HOST          the address HAProxy listens on (default 127.0.0.1)
#   INFERSCALE_PG_PORT       PostgreSQL's port, on 127.0.0.1 (default 5433)
#   INFERSCALE_BIN           the inferscale binary (default ./build/inferscale)
#   INFERSCALE_HAPROXY       the haproxy binary (default: haproxy on PATH)
#   INFERSCALE_START_TIMEOUT seconds a replica may take to answer /health (default 300)
#   INFERSCALE_STOP_TIMEOUT  seconds a process gets after SIGTERM before SIGKILL (default 15; a
#                            replica gives requests in flight serve's --shutdown-timeout, 5 s)
#
# PostgreSQL (scripts/private_postgres.sh, in CLUSTER_DIR/postgres) listens on 127.0.0.1 and a
# socket in its folder only, with trust authentication for the superuser postgres: a private
# development cluster, not a production one. When the script runs as root, PostgreSQL runs as
# the user postgres, which owns its folder.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CLUSTER_DIR=${INFERSCALE_CLUSTER_DIR:-$ROOT/cluster}
PORT=${INFERSCALE_PORT:-8000}
HOST=${INFERSCALE_HOST:-127.0.0.1}
PG_PORT=${INFERSCALE_PG_PORT:-5433}
BIN=${INFERSCALE_BIN:-$ROOT/build/inferscale}
HAPROXY=${INFERSCALE_HAPROXY:-haproxy}
START_TIMEOUT=${INFERSCALE_START_TIMEOUT:-300}
STOP_TIMEOUT=${INFERSCALE_STOP_TIMEOUT:-15}
HAPROXY_RULES=$ROOT/deploy/haproxy/inferscale.cfg
PG_DIR=$CLUSTER_DIR/postgres
PG_DB=inferscale
PG_URL=postgresql://postgres@127.0.0.1:$PG_PORT/$PG_DB

die() { echo "cluster.sh: $*" >&2; exit 1; }
say() { echo "cluster.sh: $*"; }

usage() {
  sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
}

# --- processes ------------------------------------------------------------------------------

# alive PIDFILE: the pid in PIDFILE when that process runs, else nothing (status 1).
alive() {
  local pid
  [ -f "$1" ] || return 1
  pid=$(cat "$1" 2>/dev/null) || return 1
  [[ $pid =~ ^[0-9]+$ ]] && running "$pid" || return 1
  echo "$pid"
}

# running PID: whether PID runs; a process that exited and was not yet reaped (a zombie) does not.
running() {
  kill -0 "$1" 2>/dev/null || return 1
  [ "$(ps -o stat= -p "$1" 2>/dev/null | cut -c1)" != Z ]
}

# wait_gone PID SECONDS: waits until PID has exited; status 1 if it still runs after SECONDS.
wait_gone() {
  local pid=$1 deadline=$((SECONDS + $2))
  while running "$pid"; do
    [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep 0.1
  done
}

# stop SIGNAL PIDFILE...: sends SIGNAL (TERM, or INT for PostgreSQL's fast shutdown) to the
# process of each PIDFILE at once, so that they stop side by side, then SIGKILL to any still
# running STOP_TIMEOUT seconds later; removes the pid files.
stop() {
  local sig=$1 f pid name i
  shift
  local names=() pids=()
  for f in "$@"; do
    if pid=$(alive "$f"); then
      kill -"$sig" "$pid" 2>/dev/null || true
      names+=("$(basename "$f" .pid)")
      pids+=("$pid")
    fi
  done
  for i in "${!pids[@]}"; do
    pid=${pids[$i]} name=${names[$i]}
    if ! wait_gone "$pid" "$STOP_TIMEOUT"; then
      say "$name (pid $pid) still runs ${STOP_TIMEOUT}s after SIG$sig: SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      wait_gone "$pid" 5 || say "$name (pid $pid) survived SIGKILL"
    fi
    say "stopped $name (pid $pid)"
  done
  rm -f "$@"
}

# --- ports and HTTP -------------------------------------------------------------------------

# port_in_use PORT: whether something accepts connections on 127.0.0.1:PORT, or listens on PORT
# on any address (ss, where installed).
port_in_use() {
  if command -v ss >/dev/null 2>&1 && ss -Hltn "sport = :$1" 2>/dev/null | grep -q .; then return 0; fi
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# http_status PORT PATH [HOST]: the HTTP status of GET PATH on HOST:PORT (default 127.0.0.1; 000
# when nothing answers within 2 s). Plain bash, so that the script needs neither curl nor Python.
http_status() {
  local line
  line=$(
    exec 2>/dev/null
    exec 3<>"/dev/tcp/${3:-127.0.0.1}/$1" || exit 0
    printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' "$2" >&3
    IFS= read -r -t 2 line <&3 && echo "$line"
  ) || true
  line=${line#HTTP/* }
  echo "${line:0:3}" | grep -E '^[0-9]{3}$' || echo 000
}

# --- PostgreSQL -----------------------------------------------------------------------------

start_postgres() {
  local admin
  admin=$("$ROOT/scripts/private_postgres.sh" start "$PG_DIR" "$PG_PORT") || die "PostgreSQL did not start ($PG_DIR/server.log)"
  if [ -z "$(psql "$admin" -tAc "SELECT 1 FROM pg_database WHERE datname = '$PG_DB'")" ]; then
    psql -q "$admin" -c "CREATE DATABASE $PG_DB" || die "cannot create the database $PG_DB"
  fi
  say "PostgreSQL on 127.0.0.1:$PG_PORT, database $PG_DB"
}

# --- HAProxy --------------------------------------------------------------------------------

# write_servers N: the second HAProxy file: the runtime settings of this cluster and its N replicas.
write_servers() {
  local n=$1 i file=$CLUSTER_DIR/haproxy-servers.cfg
  {
    echo "# Written by scripts/cluster.sh up $n; the routing rules are deploy/haproxy/inferscale.cfg."
    echo "global"
    # The admin socket for `cluster.sh status` (HAProxy's view of the replicas), when its path fits.
    if [ ${#CLUSTER_DIR} -lt 90 ]; then echo "    stats socket $CLUSTER_DIR/haproxy.sock mode 600 level admin"; fi
    echo
    echo "backend inferscale_replicas from replicas"
    for i in $(seq 1 "$n"); do
      echo "    server r$i 127.0.0.1:$((PORT + i)) id $i"
    done
  } >"$file"
}

# The address that reaches HAProxy from here: HOST, or loopback when HOST is a wildcard.
haproxy_probe_host() {
  case $HOST in
    ""|0.0.0.0|"*"|"::"|"[::]") echo 127.0.0.1 ;;
    *) echo "$HOST" ;;
  esac
}

start_haproxy() {
  local n=$1
  write_servers "$n"
  export INFERSCALE_HAPROXY_BIND=$HOST:$PORT
  "$HAPROXY" -c -q -f "$HAPROXY_RULES" -f "$CLUSTER_DIR/haproxy-servers.cfg" ||
    die "haproxy -c refused the configuration ($HAPROXY_RULES, $CLUSTER_DIR/haproxy-servers.cfg)"
  # In the foreground (no -D), in the background of this script: its pid is $!.
  "$HAPROXY" -f "$HAPROXY_RULES" -f "$CLUSTER_DIR/haproxy-servers.cfg" >"$CLUSTER_DIR/haproxy.log" 2>&1 </dev/null &
  echo $! >"$CLUSTER_DIR/haproxy.pid"
  local deadline=$((SECONDS + 20))
  until [ "$(http_status "$PORT" /health "$(haproxy_probe_host)")" = 200 ]; do
    alive "$CLUSTER_DIR/haproxy.pid" >/dev/null ||
      { tail -n 20 "$CLUSTER_DIR/haproxy.log" >&2; die "HAProxy exited at start ($CLUSTER_DIR/haproxy.log)"; }
    [ "$SECONDS" -lt "$deadline" ] || die "HAProxy did not answer GET /health on port $PORT within 20 s"
    sleep 0.2
  done
  say "HAProxy on $HOST:$PORT (pid $(cat "$CLUSTER_DIR/haproxy.pid"))"
}

# --- replicas -------------------------------------------------------------------------------

gpu_count() {
  if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true
  else
    echo 0
  fi
}

start_replicas() {
  local n=$1 i port gpus threads=()
  shift
  gpus=$(gpu_count)
  if [ "$gpus" -gt 0 ]; then
    [ "$n" -le "$gpus" ] || say "warning: $n replicas on $gpus GPUs: some GPUs hold two replicas (each takes serve's GPU memory defaults)"
  else
    case " $* " in
      *" --threads "*|*" --threads="*) ;;
      *) threads=(--threads "$(( $(nproc) / n > 0 ? $(nproc) / n : 1 ))") ;;
    esac
  fi
  # The default model and retrieval of scripts/run.sh, unless the serve args name their own.
  source "$ROOT/scripts/serve_defaults.sh"
  for i in $(seq 1 "$n"); do
    port=$((PORT + i))
    local env=(env)
    if [ "$gpus" -gt 0 ]; then env+=("CUDA_VISIBLE_DEVICES=$(( (i - 1) % gpus ))"); fi
    "${env[@]}" "$BIN" serve "${DEFAULT_SERVE[@]}" "${threads[@]}" --port "$port" --store "$PG_URL" "$@" \
      >"$CLUSTER_DIR/replica-$i.log" 2>&1 </dev/null &
    echo $! >"$CLUSTER_DIR/replica-$i.pid"
  done
  local deadline=$((SECONDS + START_TIMEOUT)) waiting
  while :; do
    waiting=0
    for i in $(seq 1 "$n"); do
      alive "$CLUSTER_DIR/replica-$i.pid" >/dev/null ||
        { tail -n 20 "$CLUSTER_DIR/replica-$i.log" >&2; die "replica $i exited at start ($CLUSTER_DIR/replica-$i.log)"; }
      [ "$(http_status $((PORT + i)) /health)" = 200 ] || waiting=$((waiting + 1))
    done
    [ "$waiting" = 0 ] && break
    [ "$SECONDS" -lt "$deadline" ] || die "$waiting replica(s) did not answer GET /health within ${START_TIMEOUT} s (logs in $CLUSTER_DIR)"
    sleep 0.5
  done
  say "$n replica(s) on 127.0.0.1:$((PORT + 1))-$((PORT + n)) (model: ${DEFAULT_MODEL:-as the serve args say}; store: $PG_URL)"
}

# --- commands -------------------------------------------------------------------------------

running_pidfiles() {
  local f
  for f in "$CLUSTER_DIR"/haproxy.pid "$CLUSTER_DIR"/replica-*.pid; do
    [ -f "$f" ] && alive "$f" >/dev/null && echo "$f"
  done
  local pg
  if pg=$(head -1 "$PG_DIR/data/postmaster.pid" 2>/dev/null) && running "$pg"; then echo "$PG_DIR/data/postmaster.pid"; fi
  return 0
}

cmd_down() {
  [ -d "$CLUSTER_DIR" ] || { say "nothing runs ($CLUSTER_DIR does not exist)"; return 0; }
  local f
  # HAProxy first (no new requests), then the replicas (they finish what runs, then close their
  # store connections), then PostgreSQL (SIGINT: its fast shutdown).
  stop TERM "$CLUSTER_DIR/haproxy.pid"
  local replicas=()
  for f in "$CLUSTER_DIR"/replica-*.pid; do
    if [ -e "$f" ]; then replicas+=("$f"); fi
  done
  stop TERM "${replicas[@]}"
  "$ROOT/scripts/private_postgres.sh" stop "$PG_DIR"
  rm -f "$CLUSTER_DIR/haproxy.sock" "$CLUSTER_DIR/cluster.env"
  local left
  left=$(running_pidfiles)
  [ -z "$left" ] || die "still running: $left"
  say "down"
}

cmd_up() {
  [ $# -ge 1 ] || usage
  local n=$1
  shift
  [[ $n =~ ^[1-9][0-9]*$ ]] || die "N must be a positive number of replicas, not '$n'"
  local a
  for a in "$@"; do
    case $a in
      --port|--port=*|--data-dir|--data-dir=*|--store|--store=*) die "$a is set by cluster.sh for each replica; leave it out of the serve args" ;;
    esac
  done
  [ -x "$BIN" ] || die "the inferscale binary $BIN is missing (build it, or set INFERSCALE_BIN)"
  command -v "$HAPROXY" >/dev/null 2>&1 || die "haproxy is missing (apt-get install haproxy, or set INFERSCALE_HAPROXY)"
  [ -f "$HAPROXY_RULES" ] || die "$HAPROXY_RULES is missing"
  mkdir -p "$CLUSTER_DIR"
  [ -z "$(running_pidfiles)" ] || die "a cluster already runs from $CLUSTER_DIR (scripts/cluster.sh status; scripts/cluster.sh down)"
  local p ports=("$PORT")
  for i in $(seq 1 "$n"); do ports+=($((PORT + i))); done
  ports+=("$PG_PORT")
  local layout="HAProxy $PORT, replicas $((PORT + 1))-$((PORT + n)), PostgreSQL $PG_PORT"
  for p in "${ports[@]}"; do
    [ "$p" -le 65535 ] || die "port $p is out of range (INFERSCALE_PORT=$PORT, N=$n)"
    if port_in_use "$p"; then die "port $p is taken ($layout); set INFERSCALE_PORT / INFERSCALE_PG_PORT"; fi
  done
  rm -f "$CLUSTER_DIR"/replica-*.pid
  # A start that fails half way stops what it started.
  trap 'rc=$?; if [ $rc -ne 0 ]; then say "start failed: stopping what started"; cmd_down || true; fi' EXIT
  start_postgres
  start_replicas "$n" "$@"
  start_haproxy "$n"
  printf 'N=%s\nPORT=%s\nPG_PORT=%s\n' "$n" "$PORT" "$PG_PORT" >"$CLUSTER_DIR/cluster.env"
  trap - EXIT
  say "up: http://$HOST:$PORT (logs in $CLUSTER_DIR)"
}

# haproxy_view: HAProxy's state of each replica (UP, DOWN, ...) from its admin socket.
haproxy_view() {
  local sock=$CLUSTER_DIR/haproxy.sock
  [ -S "$sock" ] && command -v python3 >/dev/null 2>&1 || return 0
  python3 - "$sock" <<'EOF' || true
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(2)
s.connect(sys.argv[1])
s.sendall(b"show stat\n")
data = b""
while chunk := s.recv(65536):
    data += chunk
lines = data.decode().splitlines()
head = lines[0].lstrip("# ").split(",")
for line in lines[1:]:
    row = dict(zip(head, line.split(",")))
    if row.get("pxname") == "inferscale_replicas" and row.get("svname") not in ("FRONTEND", "BACKEND"):
        print(f"  haproxy sees {row['svname']}: {row['status']} (in flight {row['scur']}, served {row['stot']})")
EOF
}

cmd_status() {
  local ok=0 pid f i port code
  [ -d "$CLUSTER_DIR" ] || { echo "nothing runs ($CLUSTER_DIR does not exist)"; return 1; }
  local N="" PG_PORT_RUN=$PG_PORT PORT_RUN=$PORT
  if [ -f "$CLUSTER_DIR/cluster.env" ]; then
    N=$(sed -n 's/^N=//p' "$CLUSTER_DIR/cluster.env")
    PORT_RUN=$(sed -n 's/^PORT=//p' "$CLUSTER_DIR/cluster.env")
    PG_PORT_RUN=$(sed -n 's/^PG_PORT=//p' "$CLUSTER_DIR/cluster.env")
    echo "cluster in $CLUSTER_DIR: $N replica(s), store postgresql://postgres@127.0.0.1:$PG_PORT_RUN/$PG_DB"
  else
    echo "cluster in $CLUSTER_DIR: not up"
    ok=1
  fi
  if pid=$(alive "$CLUSTER_DIR/haproxy.pid"); then
    echo "haproxy     pid $pid  port $PORT_RUN  GET /health: $(http_status "$PORT_RUN" /health "$(haproxy_probe_host)")"
  elif [ -n "$N" ]; then echo "haproxy     not running"; ok=1; fi
  for f in "$CLUSTER_DIR"/replica-*.pid; do
    [ -e "$f" ] || continue
    i=${f##*/replica-}; i=${i%.pid}
    port=$((PORT_RUN + i))
    if pid=$(alive "$f"); then
      code=$(http_status "$port" /health)
      echo "replica r$i  pid $pid  port $port  GET /health: $code"
      [ "$code" = 200 ] || ok=1
    else
      echo "replica r$i  not running (port $port; log $CLUSTER_DIR/replica-$i.log)"
      ok=1
    fi
  done
  if pid=$(head -1 "$PG_DIR/data/postmaster.pid" 2>/dev/null) && running "$pid"; then
    local ready=no
    pg_isready -q -h 127.0.0.1 -p "$PG_PORT_RUN" 2>/dev/null && ready=yes
    echo "postgres    pid $pid  port $PG_PORT_RUN  accepting connections: $ready"
    [ "$ready" = yes ] || ok=1
  elif [ -n "$N" ]; then echo "postgres    not running"; ok=1; fi
  haproxy_view
  return $ok
}

[ $# -ge 1 ] || usage
cmd=$1
shift
case $cmd in
  up) cmd_up "$@" ;;
  down) cmd_down ;;
  status) cmd_status ;;
  *) usage ;;
esac
