#!/usr/bin/env bash
# Two builds of `cairn`, side by side in one run: bench/run.sh's UpdatePlan
# (group commit) and GetPlan rows on redb, and the same two plus UpdatePlan
# on ONE session (every client on it) on a three-member etcd on loopback,
# each build in turn, ROUNDS times (A B A B …), so that the noise of a
# shared machine falls on both. Raw etcd (Put, Put on one key, serializable
# Range) is measured on the same cluster in each round, as the yardstick.
# One JSON line per measurement, labelled "<row> [<build>]", then one table.
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

ETCD_ENDPOINTS=http://127.0.0.1:2389,http://127.0.0.1:2391,http://127.0.0.1:2393
start_etcd() { # three members on loopback, each with its own data dir
  local cluster=c0=http://127.0.0.1:2390,c1=http://127.0.0.1:2392,c2=http://127.0.0.1:2394
  etcd_pids=()
  for m in 0 1 2; do
    local client=$((2389 + 2 * m)) peer=$((2390 + 2 * m))
    rm -rf "$WORK/etcd-$m"
    etcd --name "c$m" --data-dir "$WORK/etcd-$m" \
      --listen-client-urls "http://127.0.0.1:$client" --advertise-client-urls "http://127.0.0.1:$client" \
      --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
      --initial-cluster "$cluster" --initial-cluster-state new --log-level error >"$WORK/etcd-$m.log" 2>&1 &
    etcd_pids+=($!)
    pids+=($!)
  done
  for _ in $(seq 100); do
    "$BENCH" --scenario etcd-put --addr http://127.0.0.1:2389 --concurrency 1 --duration 0s --warmup 0s >/dev/null 2>&1 && return
    sleep 0.1
  done
  echo "etcd did not start" >&2; exit 1
}
stop_etcd() {
  kill "${etcd_pids[@]}"; wait "${etcd_pids[@]}" 2>/dev/null || true
}

raw_etcd() { # the yardstick, on the cluster as it is
  for spec in "etcd-put:raw etcd Put:0" "etcd-put:raw etcd Put one key:1" "etcd-range:raw etcd Range (serializable):0"; do
    IFS=: read -r scenario label sessions <<<"$spec"
    echo "-- $label" >&2
    "$BENCH" --label "$label" --scenario "$scenario" --addr http://127.0.0.1:2389 \
      --concurrency "$CONCURRENCY" --duration "$DURATION" --warmup "$WARMUP" \
      --sessions "$sessions" | tee -a "$OUT" >&2
  done
}

row() { # build-name binary engine-label flags...
  local name=$1 bin=$2 engine=$3; shift 3
  rm -rf "$WORK/data"
  CAIRN_LOG=warn "$bin" serve --listen "127.0.0.1:$PORT" --data-dir "$WORK/data" "$@" 2>>"$WORK/cairn.log" &
  local pid=$!
  pids+=("$pid")
  "$BENCH" --scenario ready --addr "$CAIRN" >/dev/null
  local scenarios=(update-plan get-plan)
  if [ "$engine" = etcd ]; then
    scenarios+=(hot)
    "$BENCH" --scenario populate --addr "$CAIRN" --sessions 1 >/dev/null
  fi
  for scenario in "${scenarios[@]}"; do
    local label extra=()
    case $scenario in
      update-plan) label="$engine UpdatePlan [$name]" ;;
      get-plan) label="$engine GetPlan [$name]" ;;
      hot) label="$engine UpdatePlan one session [$name]"; scenario=update-plan; extra=(--sessions 1) ;;
    esac
    echo "-- $label" >&2
    "$BENCH" --label "$label" --scenario "$scenario" --addr "$CAIRN" \
      --concurrency "$CONCURRENCY" --duration "$DURATION" --warmup "$WARMUP" \
      --server-pid "$pid" "${extra[@]}" | tee -a "$OUT" >&2
  done
  kill "$pid"; wait "$pid" 2>/dev/null || true
}

for round in $(seq "$ROUNDS"); do
  echo "== round $round" >&2
  for build in base head; do
    if [ "$build" = base ]; then bin=$BASE; else bin=$HEAD; fi
    row "$build" "$bin" redb
    start_etcd
    [ "$build" = base ] && raw_etcd
    row "$build" "$bin" etcd --backend etcd --etcd-endpoints "$ETCD_ENDPOINTS"
    stop_etcd
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
def runs(rs): return " · ".join(f"{r['ops_per_sec']:,.0f}" for r in rs)
def med(rs, k): return statistics.median(r.get(k) or 0 for r in rs) if rs else 0
for row in ["redb UpdatePlan", "redb GetPlan", "etcd UpdatePlan", "etcd GetPlan", "etcd UpdatePlan one session"]:
    b, h = by.get(f"{row} [base]", []), by.get(f"{row} [head]", [])
    print(f"| {row} | {runs(b)} | {runs(h)} | {med(b, 'ops_per_sec'):,.0f} / {med(h, 'ops_per_sec'):,.0f} | {med(b, 'server_cpu_us_per_op'):.1f} / {med(h, 'server_cpu_us_per_op'):.1f} |")
print()
print("| yardstick | ops/s (runs) | median | head's row / yardstick |")
print("|---|---|---:|---:|")
for raw, row in [("raw etcd Put", "etcd UpdatePlan"), ("raw etcd Put one key", "etcd UpdatePlan one session"), ("raw etcd Range (serializable)", "etcd GetPlan")]:
    r, h = by.get(raw, []), by.get(f"{row} [head]", [])
    ratio = med(h, "ops_per_sec") / med(r, "ops_per_sec") if r and h else 0
    print(f"| {raw} | {runs(r)} | {med(r, 'ops_per_sec'):,.0f} | {row}: {ratio:.2f}x |")
EOF
