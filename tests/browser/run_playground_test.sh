#!/usr/bin/env bash
# Runs tests/browser/test_playground.py: the web playground in a real headless Chromium against
# two fresh `kestrel serve`s on loopback (one without a key, one with --api-key).
# Usage: run_playground_test.sh PATH/TO/kestrel
# Uses the default model (KESTREL_DEFAULT_MODEL if set, else `kestrel serve`'s default).
# KESTREL_PLAYGROUND_SCREENSHOT=PATH saves a screenshot after a real answer (docs/playground.png).
# Builds nothing; installs Debian's chromium and chromium-driver with apt and selenium with pip
# when missing (selenium drives /usr/bin/chromedriver; it downloads no driver); always stops the
# servers.
set -euo pipefail

KESTREL="${1:?usage: $0 PATH/TO/kestrel}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PYTHON="${PYTHON:-python3}"

if ! command -v chromium >/dev/null 2>&1 || [[ ! -x /usr/bin/chromedriver ]]; then
  echo "installing chromium and chromium-driver for the playground test"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq && $sudo_cmd apt-get install -y -qq chromium chromium-driver >/dev/null
fi
if ! "$PYTHON" -c 'import selenium' 2>/dev/null; then
  "$PYTHON" -m pip install --quiet selenium || "$PYTHON" -m pip install --quiet --break-system-packages selenium
fi
# Selenium must not look for (or fetch) a browser or driver of its own.
export SE_OFFLINE=true SE_AVOID_STATS=true

free_port() {
  "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

MODEL_ARGS=()
if [[ -n "${KESTREL_DEFAULT_MODEL:-}" ]]; then
  MODEL_ARGS=(--model "$KESTREL_DEFAULT_MODEL")
fi
KEY="playground-test-key-$$"
PORT="$(free_port)"
KEYED_PORT="$(free_port)"
LOG="$(mktemp)"
KEYED_LOG="$(mktemp)"
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -f "$LOG" "$KEYED_LOG"
}
trap cleanup EXIT

"$KESTREL" serve "${MODEL_ARGS[@]}" --hostname 127.0.0.1 --port "$PORT" --kv-cache-memory 256MiB \
  >"$LOG" 2>&1 &
PIDS+=($!)
"$KESTREL" serve "${MODEL_ARGS[@]}" --hostname 127.0.0.1 --port "$KEYED_PORT" \
  --kv-cache-memory 128MiB --api-key "$KEY" >"$KEYED_LOG" 2>&1 &
PIDS+=($!)

wait_ready() { # PID PORT LOG
  for _ in $(seq 1 240); do
    if ! kill -0 "$1" 2>/dev/null; then
      echo "kestrel serve exited early:" >&2
      cat "$3" >&2
      exit 1
    fi
    if "$PYTHON" -c "import urllib.request, sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:$2/health', timeout=2).status == 200 else 1)" 2>/dev/null; then
      return 0
    fi
    sleep 0.5
  done
  echo "kestrel serve on port $2 did not become ready" >&2
  exit 1
}
wait_ready "${PIDS[0]}" "$PORT" "$LOG"
wait_ready "${PIDS[1]}" "$KEYED_PORT" "$KEYED_LOG"

if ! "$PYTHON" "$HERE/test_playground.py" "http://127.0.0.1:$PORT" "http://127.0.0.1:$KEYED_PORT" "$KEY"; then
  echo "server log:" >&2
  cat "$LOG" >&2
  echo "keyed server log:" >&2
  cat "$KEYED_LOG" >&2
  exit 1
fi
