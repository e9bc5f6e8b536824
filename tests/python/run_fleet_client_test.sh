#!/usr/bin/env bash
# Runs tests/python/test_fleet_clients.py: the official `openai` and `anthropic` clients against a
# gateway with workers of two different models (SmolLM2 as `a`, Gemma 3 270M as `b`, which has no chat
# template), beside a `kestrel serve` of each model; the answers must agree.
# Usage: run_fleet_client_test.sh PATH/TO/kestrel
# Needs KESTREL_DEFAULT_MODEL and KESTREL_GEMMA3_270M (scripts/test.sh sets both), redis-server
# and the `openai` and `anthropic` packages (installed with pip when missing). Always stops what it
# started.
set -euo pipefail

KESTREL="${1:?usage: $0 PATH/TO/kestrel}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PYTHON="${PYTHON:-python3}"
# shellcheck source=../../scripts/lib/server.sh
source "$HERE/../../scripts/lib/server.sh"
MODEL_A="${KESTREL_DEFAULT_MODEL:?KESTREL_DEFAULT_MODEL is not set (scripts/test.sh sets it)}"
MODEL_B="${KESTREL_GEMMA3_270M:?KESTREL_GEMMA3_270M is not set (scripts/test.sh sets it)}"

for package in openai anthropic; do
  if ! "$PYTHON" -c "import $package" 2>/dev/null; then
    "$PYTHON" -m pip install --quiet "$package" ||
      "$PYTHON" -m pip install --quiet --break-system-packages "$package"
  fi
done

WORK="$(mktemp -d)"
cleanup() {
  server_stop_all
  rm -rf "$WORK"
}
trap cleanup EXIT

REDIS_PORT="$(free_port)"
server_start "$WORK/redis.log" redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' \
  --appendonly no --dir "$WORK"
for _ in $(seq 1 100); do
  [[ "$(redis-cli -p "$REDIS_PORT" PING 2>/dev/null)" == PONG ]] && break
  sleep 0.1
done
REDIS_URL="redis://127.0.0.1:$REDIS_PORT"

common=(--threads 1 --kv-cache-memory 128MiB)
SERVE_A_PORT="$(free_port)"
server_start "$WORK/serve-a.log" "$KESTREL" serve --model "$MODEL_A" --served-model-name a \
  --hostname 127.0.0.1 --port "$SERVE_A_PORT" "${common[@]}"
SERVE_A_PID="$SERVER_PID"
SERVE_B_PORT="$(free_port)"
server_start "$WORK/serve-b.log" "$KESTREL" serve --model "$MODEL_B" --served-model-name b \
  --hostname 127.0.0.1 --port "$SERVE_B_PORT" "${common[@]}"
SERVE_B_PID="$SERVER_PID"
server_start "$WORK/worker-a.log" "$KESTREL" worker --model "$MODEL_A" --served-model-name a \
  --redis-url "$REDIS_URL" --worker-id clients-a "${common[@]}"
server_start "$WORK/worker-b.log" "$KESTREL" worker --model "$MODEL_B" --served-model-name b \
  --redis-url "$REDIS_URL" --worker-id clients-b "${common[@]}"
GATEWAY_PORT="$(free_port)"
server_start "$WORK/gateway.log" "$KESTREL" gateway --redis-url "$REDIS_URL" \
  --hostname 127.0.0.1 --port "$GATEWAY_PORT"
GATEWAY_PID="$SERVER_PID"

server_wait_ready "$SERVE_A_PID" "$SERVE_A_PORT" "$WORK/serve-a.log"
server_wait_ready "$SERVE_B_PID" "$SERVE_B_PORT" "$WORK/serve-b.log"
server_wait_ready "$GATEWAY_PID" "$GATEWAY_PORT" "$WORK/gateway.log"
# Ready means one model has a live worker; wait until both are listed.
for _ in $(seq 1 240); do
  "$PYTHON" - "$GATEWAY_PORT" <<'PY' && break
import json, sys, urllib.request
ids = {m["id"] for m in json.load(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/v1/models"))["data"]}
sys.exit(0 if ids == {"a", "b"} else 1)
PY
  sleep 0.5
done

if ! "$PYTHON" "$HERE/test_fleet_clients.py" "http://127.0.0.1:$GATEWAY_PORT/v1" \
  "http://127.0.0.1:$SERVE_A_PORT/v1" "http://127.0.0.1:$SERVE_B_PORT/v1"; then
  for log in gateway worker-a worker-b serve-a serve-b; do server_log_tail "$WORK/$log.log"; done
  exit 1
fi
