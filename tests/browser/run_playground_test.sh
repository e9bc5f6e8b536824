#!/usr/bin/env bash
# Runs tests/browser/test_playground.py: the web playground in a real headless Chromium against
# two fresh `kestrel serve`s on loopback (one without a key that also serves the SmolLM2 LoRA
# fixture as an adapter, one with --api-key) and a fleet of one: redis-server, one
# `kestrel worker` and the `kestrel gateway` in front of it.
# Usage: run_playground_test.sh PATH/TO/kestrel
# Uses the default model (KESTREL_DEFAULT_MODEL if set, else `kestrel serve`'s default).
# KESTREL_PLAYGROUND_SCREENSHOT=PATH saves a screenshot after a real answer (docs/playground.png).
# Builds nothing; installs Debian's chromium, chromium-driver and redis-server with apt and
# selenium with pip when missing (selenium drives /usr/bin/chromedriver; it downloads no
# driver); always stops every process it started.
set -euo pipefail

KESTREL="${1:?usage: $0 PATH/TO/kestrel}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
LORA_NAME="smollm2-r8"
LORA_DIR="$HERE/../fixtures/lora/smollm2-r8"
PYTHON="${PYTHON:-python3}"
# shellcheck source=../../scripts/lib/server.sh
source "$HERE/../../scripts/lib/server.sh"

if ! command -v chromium >/dev/null 2>&1 || [[ ! -x /usr/bin/chromedriver ]] \
  || ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
  echo "installing chromium, chromium-driver and redis-server for the playground test"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq \
    && $sudo_cmd apt-get install -y -qq chromium chromium-driver redis-server >/dev/null
fi
if ! "$PYTHON" -c 'import selenium' 2>/dev/null; then
  "$PYTHON" -m pip install --quiet selenium || "$PYTHON" -m pip install --quiet --break-system-packages selenium
fi
# Selenium must not look for (or fetch) a browser or driver of its own.
export SE_OFFLINE=true SE_AVOID_STATS=true

MODEL_ARGS=()
if [[ -n "${KESTREL_DEFAULT_MODEL:-}" ]]; then
  MODEL_ARGS=(--model "$KESTREL_DEFAULT_MODEL")
fi
KEY="playground-test-key-$$"
PORT="$(free_port)"
KEYED_PORT="$(free_port)"
REDIS_PORT="$(free_port)"
GATEWAY_PORT="$(free_port)"
WORKER_METRICS_PORT="$(free_port)"
WORK="$(mktemp -d)"
cleanup() {
  server_stop_all
  rm -rf "$WORK"
}
trap cleanup EXIT

server_start "$WORK/serve.log" "$KESTREL" serve "${MODEL_ARGS[@]}" --hostname 127.0.0.1 \
  --port "$PORT" --kv-cache-memory 256MiB --lora-modules "$LORA_NAME=$LORA_DIR"
SERVE_PID="$SERVER_PID"
server_start "$WORK/keyed.log" "$KESTREL" serve "${MODEL_ARGS[@]}" --hostname 127.0.0.1 \
  --port "$KEYED_PORT" --kv-cache-memory 128MiB --api-key "$KEY"
KEYED_PID="$SERVER_PID"

# The fleet: a throwaway Redis (no persistence), one worker, the gateway.
server_start "$WORK/redis.log" redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' \
  --appendonly no --dir "$WORK"
for _ in $(seq 1 100); do
  [[ "$(redis-cli -p "$REDIS_PORT" PING 2>/dev/null)" == PONG ]] && break
  sleep 0.1
done
REDIS_URL="redis://127.0.0.1:$REDIS_PORT"
server_start "$WORK/worker.log" "$KESTREL" worker "${MODEL_ARGS[@]}" --redis-url "$REDIS_URL" \
  --worker-id playground-w1 --kv-cache-memory 128MiB --metrics-host 127.0.0.1 \
  --metrics-port "$WORKER_METRICS_PORT"
server_start "$WORK/gateway.log" "$KESTREL" gateway --redis-url "$REDIS_URL" \
  --hostname 127.0.0.1 --port "$GATEWAY_PORT"
GATEWAY_PID="$SERVER_PID"

# The gateway's /health is 200 once a worker is live.
server_wait_ready "$SERVE_PID" "$PORT" "$WORK/serve.log"
server_wait_ready "$KEYED_PID" "$KEYED_PORT" "$WORK/keyed.log"
server_wait_ready "$GATEWAY_PID" "$GATEWAY_PORT" "$WORK/gateway.log"

if ! "$PYTHON" "$HERE/test_playground.py" "http://127.0.0.1:$PORT" \
  "http://127.0.0.1:$KEYED_PORT" "$KEY" "$LORA_NAME" "http://127.0.0.1:$GATEWAY_PORT"; then
  for log in serve keyed redis worker gateway; do
    echo "$log log:" >&2
    cat "$WORK/$log.log" >&2
  done
  exit 1
fi
