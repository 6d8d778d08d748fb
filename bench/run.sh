#!/usr/bin/env bash
# The whole comparison in one run, on one machine: Cairn's transport ceiling
# (health checks), durable UpdatePlan with group commit and with
# --commit-batch 1, GetPlan, etcd Put/Range with the same load generator,
# watch fan-out latency and memory per idle watch stream. Prints one table.
#
#   bench/run.sh                      # defaults below
#   DURATION=20s CONCURRENCY=64 bench/run.sh
#
# Needs etcd (Debian: apt-get install etcd-server); installs it if missing.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-2s}
CONCURRENCY=${CONCURRENCY:-64}
PAYLOAD=${PAYLOAD:-256}
WATCHERS=${WATCHERS:-1000}
RATE=${RATE:-1000}
IDLE_STREAMS=${IDLE_STREAMS:-10000}
WORK=${WORK:-${TMPDIR:-/tmp}/cairn-bench}
OUT=${OUT:-$WORK/results.jsonl}

if ! command -v etcd >/dev/null; then
  apt-get update -q && apt-get install -y -q etcd-server
fi
cargo build --release --bin cairn
cargo build --release -p cairn-bench
TARGET_DIR=$(cargo metadata --no-deps --format-version 1 | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
BIN=$TARGET_DIR/release/cairn
BENCH=$TARGET_DIR/release/cairn-bench
rm -rf "$WORK" && mkdir -p "$WORK"
: > "$OUT"

PORT=50551
server_pid=""
start_cairn() { # extra flags...
  rm -rf "$WORK/cairn-data"
  CAIRN_LOG=warn "$BIN" serve --listen "127.0.0.1:$PORT" --data-dir "$WORK/cairn-data" "$@" 2>>"$WORK/cairn.log" &
  server_pid=$!
  for _ in $(seq 100); do
    "$BENCH" --scenario health --addr "http://127.0.0.1:$PORT" --concurrency 1 --duration 0s --warmup 0s >/dev/null 2>&1 && return
    sleep 0.1
  done
  echo "cairn did not start" >&2; exit 1
}
stop() { kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; }
trap 'kill $server_pid 2>/dev/null || true' EXIT

bench() { # label scenario addr [flags...]
  local label=$1 scenario=$2 addr=$3; shift 3
  echo "-- $label" >&2
  "$BENCH" --label "$label" --scenario "$scenario" --addr "$addr" \
    --concurrency "$CONCURRENCY" --duration "$DURATION" --warmup "$WARMUP" \
    --payload "$PAYLOAD" --server-pid "$server_pid" "$@" | tee -a "$OUT" >&2
}

CAIRN="http://127.0.0.1:$PORT"
start_cairn
bench "health check (transport ceiling)" health "$CAIRN"
bench "UpdatePlan, group commit" update-plan "$CAIRN"
bench "GetPlan" get-plan "$CAIRN"
stop

start_cairn --commit-batch 1
bench "UpdatePlan, --commit-batch 1" update-plan "$CAIRN"
stop

rm -rf "$WORK/etcd-data"
etcd --name bench --data-dir "$WORK/etcd-data" \
  --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
  --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
  --initial-cluster bench=http://127.0.0.1:2380 --log-level error >"$WORK/etcd.log" 2>&1 &
server_pid=$!
for _ in $(seq 100); do
  "$BENCH" --scenario etcd-range --addr http://127.0.0.1:2379 --concurrency 1 --duration 0s --warmup 0s >/dev/null 2>&1 && break
  sleep 0.1
done
bench "etcd Put" etcd-put http://127.0.0.1:2379
bench "etcd Range (serializable)" etcd-range http://127.0.0.1:2379
stop

start_cairn
bench "watch fan-out, $WATCHERS tree watchers, $RATE updates/s" watch-fanout "$CAIRN" \
  --watchers "$WATCHERS" --trees "$WATCHERS" --rate "$RATE"
stop

start_cairn
bench "idle watch streams: $IDLE_STREAMS" watch-memory "$CAIRN" --watchers "$IDLE_STREAMS" --trees 100
stop

python3 bench/table.py "$OUT"
