#!/usr/bin/env bash
# Two builds of `cairn`, side by side in one run: bench/run.sh's UpdatePlan
# (group commit) and GetPlan rows on redb, and the same two on a one-member
# etcd, each build in turn, ROUNDS times (A B A B …), so that the noise of a
# shared machine falls on both. One JSON line per measurement, labelled
# "<row> [<build>]", then one table.
#
#   bench/compare.sh BASE_BINARY HEAD_BINARY        # ROUNDS=3 DURATION=8s
#
# Needs etcd (Debian: etcd-server); builds cairn-bench.
set -euo pipefail
cd "$(dirname "$0")/.."

BASE=${1:?base binary}
HEAD=${2:?head binary}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-8s}
WARMUP=${WARMUP:-2s}
CONCURRENCY=${CONCURRENCY:-64}
WORK=${WORK:-${TMPDIR:-/tmp}/cairn-compare}
OUT=${OUT:-$WORK/results.jsonl}

cargo build --release -p cairn-bench
TARGET_DIR=$(cargo metadata --no-deps --format-version 1 | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
BENCH=$TARGET_DIR/release/cairn-bench
rm -rf "$WORK" && mkdir -p "$WORK"
: > "$OUT"

PORT=50561
CAIRN="http://127.0.0.1:$PORT"
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT

start_etcd() {
  rm -rf "$WORK/etcd-data"
  etcd --name compare --data-dir "$WORK/etcd-data" \
    --listen-client-urls http://127.0.0.1:2389 --advertise-client-urls http://127.0.0.1:2389 \
    --listen-peer-urls http://127.0.0.1:2390 --initial-advertise-peer-urls http://127.0.0.1:2390 \
    --initial-cluster compare=http://127.0.0.1:2390 --log-level error >"$WORK/etcd.log" 2>&1 &
  etcd_pid=$!
  pids+=("$etcd_pid")
  for _ in $(seq 100); do
    "$BENCH" --scenario etcd-range --addr http://127.0.0.1:2389 --concurrency 1 --duration 0s --warmup 0s >/dev/null 2>&1 && return
    sleep 0.1
  done
  echo "etcd did not start" >&2; exit 1
}

row() { # build-name binary engine-label flags...
  local name=$1 bin=$2 engine=$3; shift 3
  rm -rf "$WORK/data"
  CAIRN_LOG=warn "$bin" serve --listen "127.0.0.1:$PORT" --data-dir "$WORK/data" "$@" 2>>"$WORK/cairn.log" &
  local pid=$!
  pids+=("$pid")
  "$BENCH" --scenario ready --addr "$CAIRN" >/dev/null
  for scenario in update-plan get-plan; do
    local label
    case $scenario in
      update-plan) label="$engine UpdatePlan [$name]" ;;
      get-plan) label="$engine GetPlan [$name]" ;;
    esac
    echo "-- $label" >&2
    "$BENCH" --label "$label" --scenario "$scenario" --addr "$CAIRN" \
      --concurrency "$CONCURRENCY" --duration "$DURATION" --warmup "$WARMUP" \
      --server-pid "$pid" | tee -a "$OUT" >&2
  done
  kill "$pid"; wait "$pid" 2>/dev/null || true
}

for round in $(seq "$ROUNDS"); do
  echo "== round $round" >&2
  for build in base head; do
    if [ "$build" = base ]; then bin=$BASE; else bin=$HEAD; fi
    row "$build" "$bin" redb
    start_etcd
    row "$build" "$bin" etcd --backend etcd --etcd-endpoints http://127.0.0.1:2389
    kill "$etcd_pid"; wait "$etcd_pid" 2>/dev/null || true
  done
done

python3 - "$OUT" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = {}
for r in rows:
    by.setdefault(r["label"], []).append(r)
print("| row | base ops/s (runs) | head ops/s (runs) | base / head median | server CPU µs/op base / head |")
print("|---|---|---|---:|---:|")
for row in ["redb UpdatePlan", "redb GetPlan", "etcd UpdatePlan", "etcd GetPlan"]:
    b, h = by.get(f"{row} [base]", []), by.get(f"{row} [head]", [])
    def runs(rs): return " · ".join(f"{r['ops_per_sec']:,.0f}" for r in rs)
    def med(rs, k): return statistics.median(r.get(k) or 0 for r in rs) if rs else 0
    print(f"| {row} | {runs(b)} | {runs(h)} | {med(b, 'ops_per_sec'):,.0f} / {med(h, 'ops_per_sec'):,.0f} | {med(b, 'server_cpu_us_per_op'):.1f} / {med(h, 'server_cpu_us_per_op'):.1f} |")
EOF
