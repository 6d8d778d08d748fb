#!/usr/bin/env bash
# The whole comparison in one run, on one machine, printed as one table:
#  - Cairn's transport ceiling (health checks), durable UpdatePlan with
#    group commit and with --commit-batch 1, GetPlan;
#  - the same three, and etcd's Put, driven by h2load (nghttp2), so the
#    ratios do not depend on Cairn's own load generator;
#  - etcd Put/Range with cairn-bench;
#  - the etcd backend on that etcd: UpdatePlan and GetPlan with one Cairn
#    replica and with two;
#  - UpdatePlan with 5, 50 and 200-step plans;
#  - leases: KeepAlive over 10,000 and 100,000 leased sessions (server CPU
#    per keep-alive), beside UpdatePlan on the same store, and how many
#    lease deadlines the expiry ticks looked at meanwhile;
#  - growth: random UpdatePlan and GetPlan over 1,000 and 1,000,000
#    sessions, the file's bytes per session, the server's RSS, restart time
#    (with the default caches, then with caches sized to the store);
#  - watch fan-out to 1,000 tree watchers and to 1,000 `all` watchers,
#    memory per idle watch stream.
#
#   bench/run.sh                      # defaults below
#   DURATION=20s CONCURRENCY=64 bench/run.sh
#   ONLY=leases bench/run.sh          # the ceiling rows and the lease rows
#
# Needs etcd (Debian: etcd-server) and h2load (nghttp2-client); installs
# them if missing.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-2s}
CONCURRENCY=${CONCURRENCY:-64}
PAYLOAD=${PAYLOAD:-256}
WATCHERS=${WATCHERS:-1000}
RATE=${RATE:-1000}
ALL_RATE=${ALL_RATE:-50}
IDLE_STREAMS=${IDLE_STREAMS:-10000}
GROWTH=${GROWTH:-1000000}
WORK=${WORK:-${TMPDIR:-/tmp}/cairn-bench}
OUT=${OUT:-$WORK/results.jsonl}

missing=()
command -v etcd >/dev/null || missing+=(etcd-server)
command -v h2load >/dev/null || missing+=(nghttp2-client)
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -q && apt-get install -y -q "${missing[@]}"
fi
cargo build --release --bin cairn
cargo build --release -p cairn-bench
TARGET_DIR=$(cargo metadata --no-deps --format-version 1 | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
BIN=$TARGET_DIR/release/cairn
BENCH=$TARGET_DIR/release/cairn-bench
rm -rf "$WORK" && mkdir -p "$WORK"
: > "$OUT"

PORT=50551
CAIRN="http://127.0.0.1:$PORT"
server_pid=""
start_cairn() { # [keep] extra flags...: a server on a fresh data dir (or the kept one)
  if [ "${1:-}" = keep ]; then shift; else rm -rf "$WORK/cairn-data"; fi
  CAIRN_LOG=warn "$BIN" serve --listen "127.0.0.1:$PORT" --data-dir "$WORK/cairn-data" "$@" 2>>"$WORK/cairn.log" &
  server_pid=$!
  "$BENCH" --scenario ready --addr "$CAIRN" >/dev/null
}
stop() { kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; }
trap 'kill $server_pid 2>/dev/null || true' EXIT

bench() { # label scenario addr [flags...]
  local label=$1 scenario=$2 addr=$3; shift 3
  echo "-- $label" >&2
  "$BENCH" --label "$label" --scenario "$scenario" --addr "$addr" \
    --concurrency "$CONCURRENCY" --duration "${ROW_DURATION:-$DURATION}" --warmup "$WARMUP" \
    --payload "${ROW_PAYLOAD:-$PAYLOAD}" --server-pid "$server_pid" "$@" | tee -a "$OUT" >&2
}

h2() { # label path body-scenario: h2load, 16 connections x 4 streams
  local label=$1 path=$2 body=$WORK/body-$3.bin
  echo "-- $label" >&2
  "$BENCH" --scenario "$3" --payload "$PAYLOAD" --write-body "$body"
  python3 bench/h2load.py "$label" "$ADDR/$path" "$body" "$server_pid" "${DURATION%s}" 16 4 \
    | tee -a "$OUT" >&2
}

note() { # a JSON line of its own (file sizes, restart times)
  echo "$1" | tee -a "$OUT" >&2
}

start_etcd() {
  rm -rf "$WORK/etcd-data"
  etcd --name bench --data-dir "$WORK/etcd-data" \
    --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster bench=http://127.0.0.1:2380 --log-level error >"$WORK/etcd.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 100); do
    "$BENCH" --scenario etcd-range --addr http://127.0.0.1:2379 --concurrency 1 --duration 0s --warmup 0s >/dev/null 2>&1 && return
    sleep 0.1
  done
  echo "etcd did not start" >&2; exit 1
}

# ---- leases: a keep-alive is a renewal in memory; expiry looks at the
# due deadlines only (the metrics say how many it looked at)
leases_rows() {
  MPORT=$((PORT + 10))
  metric() { # the value of the series whose line starts with $1
    python3 -c "import sys, urllib.request as u; t = u.urlopen('http://127.0.0.1:$MPORT/metrics').read().decode(); print(next((int(float(l.split()[-1])) for l in t.splitlines() if l.startswith(sys.argv[1])), 0))" "$1"
  }
  examined() { metric cairn_lease_deadlines_examined_total; }
  for n in 10000 100000; do
    start_cairn --metrics-listen "127.0.0.1:$MPORT"
    bench "populate $n sessions, each leased" populate "$CAIRN" --sessions "$n" --leased
    before=$(examined)
    bench "KeepAlive, random of $n leased sessions" keep-alive "$CAIRN" --sessions "$n"
    note "{\"label\": \"lease deadlines examined during the $n-lease KeepAlive row\", \"scenario\": \"Examined\", \"sessions\": $n, \"examined\": $(( $(examined) - before ))}"
    bench "UpdatePlan, random of $n leased sessions" update-plan "$CAIRN" --sessions "$n"
    stop
  done
  # 1% silent: 99,000 renewed in turn, 1,000 never after populate, which
  # go STALLED a TTL (60 s) later and LOST a grace (5 s) after that. The
  # row lasts long enough for all of them to be lost.
  n=100000
  start_cairn --metrics-listen "127.0.0.1:$MPORT" --lease-grace 5s
  bench "populate $n sessions, each leased" populate "$CAIRN" --sessions "$n" --leased
  before=$(examined)
  ROW_DURATION=75s bench "KeepAlive, $n leased sessions, 1% silent (all lost by the end)" keep-alive "$CAIRN" --sessions "$n" --silent-every 100
  examined_now=$(( $(examined) - before ))
  stalled=$(metric 'cairn_lease_transitions_total{to="stalled"}')
  lost=$(metric 'cairn_lease_transitions_total{to="lost"}')
  note "{\"label\": \"lease deadlines examined during the 1%-silent KeepAlive row\", \"scenario\": \"Examined\", \"sessions\": $n, \"examined\": $examined_now, \"stalled\": $stalled, \"lost\": $lost}"
  stop
}

# ---- the transport ceiling, writes and reads (cairn-bench)
start_cairn
bench "health check (transport ceiling)" health "$CAIRN"
bench "UpdatePlan, group commit" update-plan "$CAIRN"
bench "GetPlan" get-plan "$CAIRN"
stop

start_cairn --commit-batch 1
bench "UpdatePlan, --commit-batch 1" update-plan "$CAIRN"
stop

if [ "${ONLY:-}" = leases ]; then # the lease rows beside the ceiling rows above
  leases_rows
  python3 bench/table.py "$OUT"
  exit 0
fi

# ---- the same with h2load, and etcd Put with it
start_cairn
ADDR=$CAIRN
h2 "h2load: health check" grpc.health.v1.Health/Check health
h2 "h2load: UpdatePlan" cairn.v1.PlanService/UpdatePlan update-plan
h2 "h2load: GetPlan" cairn.v1.PlanService/GetPlan get-plan
stop

start_etcd
ADDR=http://127.0.0.1:2379
h2 "h2load: etcd Put" etcdserverpb.KV/Put etcd-put
stop
start_etcd
bench "etcd Put" etcd-put http://127.0.0.1:2379
bench "etcd Range (serializable)" etcd-range http://127.0.0.1:2379
stop

# ---- the etcd backend on that same etcd: one Cairn replica, then two
# (half the clients on each, each on its own sessions). Server CPU is the
# first replica's only; etcd's own is not counted.
start_etcd
etcd_pid=$server_pid
ETCD_FLAGS=(--backend etcd --etcd-endpoints http://127.0.0.1:2379)
start_cairn "${ETCD_FLAGS[@]}"
bench "etcd backend, 1 replica: UpdatePlan" update-plan "$CAIRN"
bench "etcd backend, 1 replica: GetPlan" get-plan "$CAIRN"
PORT2=$((PORT + 1))
CAIRN_LOG=warn "$BIN" serve --listen "127.0.0.1:$PORT2" --data-dir "$WORK/cairn-data-2" "${ETCD_FLAGS[@]}" 2>>"$WORK/cairn.log" &
second_pid=$!
"$BENCH" --scenario ready --addr "http://127.0.0.1:$PORT2" >/dev/null
bench2() { # label scenario: half the clients on each replica, one row
  local label=$1 scenario=$2 half=$((CONCURRENCY / 2))
  echo "-- $label" >&2
  local common=(--label "$label" --scenario "$scenario" --concurrency "$half"
    --duration "$DURATION" --warmup "$WARMUP" --payload "$PAYLOAD")
  "$BENCH" "${common[@]}" --addr "$CAIRN" --session-prefix r1 >"$WORK/r1.json" &
  local first=$!
  "$BENCH" "${common[@]}" --addr "http://127.0.0.1:$PORT2" --session-prefix r2 >"$WORK/r2.json"
  wait "$first"
  python3 bench/merge.py "$WORK/r1.json" "$WORK/r2.json" | tee -a "$OUT" >&2
}
bench2 "etcd backend, 2 replicas: UpdatePlan" update-plan
bench2 "etcd backend, 2 replicas: GetPlan" get-plan
kill "$second_pid"; wait "$second_pid" 2>/dev/null || true
stop
kill "$etcd_pid"; wait "$etcd_pid" 2>/dev/null || true

leases_rows

# ---- plan size: the same ~51 bytes per step, 5, 50 and 200 steps
start_cairn
for steps in 5 50 200; do
  ROW_PAYLOAD=$((51 * steps)) bench "UpdatePlan, $steps steps" update-plan "$CAIRN" --steps "$steps"
done
stop

# ---- growth: random sessions among 1,000, then among $GROWTH
for n in 1000 "$GROWTH"; do
  start_cairn
  bench "populate $n sessions (5 steps each)" populate "$CAIRN" --sessions "$n"
  bench "UpdatePlan, random of $n sessions" update-plan "$CAIRN" --sessions "$n"
  bench "GetPlan, random of $n sessions" get-plan "$CAIRN" --sessions "$n"
  stop
  bytes=$(du -B1 "$WORK/cairn-data/cairn.redb" | cut -f1)
  note "{\"label\": \"store file, $n sessions\", \"scenario\": \"FileSize\", \"sessions\": $n, \"bytes\": $bytes}"
  start=$(date +%s%N)
  start_cairn keep
  ready=$(date +%s%N)
  note "{\"label\": \"restart, $n sessions\", \"scenario\": \"Restart\", \"sessions\": $n, \"seconds\": $(python3 -c "print(($ready - $start) / 1e9)"), \"server_rss_kb\": $(grep VmRSS /proc/$server_pid/status | awk '{print $2}')}"
  stop
done

# ---- growth again, with the caches sized to hold the whole store: what
# memory buys (the server's RSS is the price, stated in the table)
SIZED=${SIZED:-2147483648}
start_cairn --db-cache-bytes "$SIZED" --plan-cache-bytes "$SIZED"
bench "populate $GROWTH sessions, caches sized to the store" populate "$CAIRN" --sessions "$GROWTH"
bench "UpdatePlan, random of $GROWTH sessions, caches sized to the store" update-plan "$CAIRN" --sessions "$GROWTH"
bench "GetPlan, random of $GROWTH sessions, caches sized to the store" get-plan "$CAIRN" --sessions "$GROWTH"
stop

# ---- watches
start_cairn
bench "watch fan-out, $WATCHERS tree watchers, $RATE updates/s" watch-fanout "$CAIRN" \
  --watchers "$WATCHERS" --trees "$WATCHERS" --rate "$RATE"
stop

start_cairn
bench "watch fan-out, $WATCHERS all watchers, $ALL_RATE updates/s" watch-fanout "$CAIRN" \
  --watchers "$WATCHERS" --trees 100 --rate "$ALL_RATE" --watch all
stop

start_cairn
bench "idle watch streams: $IDLE_STREAMS" watch-memory "$CAIRN" --watchers "$IDLE_STREAMS" --trees 100
stop

python3 bench/table.py "$OUT"
