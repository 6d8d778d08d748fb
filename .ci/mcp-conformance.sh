#!/usr/bin/env bash
# The official MCP conformance suite's server scenarios against /mcp, for
# the capabilities Cairn advertises (tools). The others test the reference
# server's own tools, resources and prompts: README, "Agents: the planning
# tools over MCP", says which and why.
#
#   .ci/mcp-conformance.sh PATH/TO/cairn
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:?the cairn binary}
# The suite needs Node 22: the `node` package of the registry brings it.
npm install --silent --no-save --no-audit --no-fund --prefix .ci/.conformance \
  @modelcontextprotocol/conformance@0.1.16 node@22.23.3
NODE=.ci/.conformance/node_modules/.bin/node
SUITE=.ci/.conformance/node_modules/@modelcontextprotocol/conformance/dist/index.js
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
GRPC=$(free_port)
WEB=$(free_port)
DATA=$(mktemp -d)
"$BIN" serve --listen "127.0.0.1:$GRPC" --web-listen "127.0.0.1:$WEB" --data-dir "$DATA/data" 2>"$DATA/cairn.log" &
pid=$!
trap 'kill $pid 2>/dev/null || true; rm -rf "$DATA"' EXIT
for _ in $(seq 100); do
  curl -s -o /dev/null "http://127.0.0.1:$WEB/login" && break
  sleep 0.1
done
# `localhost`, as the suite's DNS-rebinding check sends it.
URL="http://localhost:$WEB/mcp?agent_id=conformance"
failed=0
for scenario in server-initialize ping tools-list dns-rebinding-protection; do
  if "$NODE" "$SUITE" server --url "$URL" --scenario "$scenario" >"$DATA/$scenario.log" 2>&1; then
    echo "passed: $scenario"
  else
    echo "FAILED: $scenario"
    cat "$DATA/$scenario.log"
    failed=1
  fi
done
exit $failed
