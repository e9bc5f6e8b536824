#!/usr/bin/env bash
# Runs the real-client checks against a fresh `kestrel serve` (with the Hermes tool-call parser):
# tests/python/test_openai_client.py (the `openai` client), tests/python/test_responses_client.py
# (the `openai` client's Responses API), tests/python/test_agent_clients.py (`openai`
# structured output and tools, LangChain, huggingface_hub) and tests/python/test_anthropic_client.py
# (the `anthropic` client on /v1/messages).
# Usage: run_openai_client_test.sh PATH/TO/kestrel
# Uses the default model (KESTREL_DEFAULT_MODEL if set, else `kestrel serve`'s default).
# Builds nothing; installs the `openai`, `langchain-openai`, `huggingface_hub` and `anthropic`
# packages with pip when missing; always stops the server.
set -euo pipefail

KESTREL="${1:?usage: $0 PATH/TO/kestrel}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PYTHON="${PYTHON:-python3}"
# shellcheck source=../../scripts/lib/server.sh
source "$HERE/../../scripts/lib/server.sh"

# The clients under test: module to import, and the package that provides it.
for pair in openai:openai langchain_openai:langchain-openai huggingface_hub:huggingface_hub \
  anthropic:anthropic; do
  module="${pair%%:*}" package="${pair#*:}"
  if ! "$PYTHON" -c "import $module" 2>/dev/null; then
    "$PYTHON" -m pip install --quiet "$package" ||
      "$PYTHON" -m pip install --quiet --break-system-packages "$package"
  fi
done

PORT="$(free_port)"
LOG="$(mktemp)"
MODEL_ARGS=()
if [[ -n "${KESTREL_DEFAULT_MODEL:-}" ]]; then
  MODEL_ARGS=(--model "$KESTREL_DEFAULT_MODEL")
fi

cleanup() {
  server_stop_all
  rm -f "$LOG"
}
trap cleanup EXIT
server_start "$LOG" "$KESTREL" serve "${MODEL_ARGS[@]}" --hostname 127.0.0.1 --port "$PORT" \
  --kv-cache-memory 256MiB --tool-call-parser hermes
server_wait_ready "$SERVER_PID" "$PORT" "$LOG"

if ! "$PYTHON" "$HERE/test_openai_client.py" "http://127.0.0.1:$PORT/v1" \
  || ! "$PYTHON" "$HERE/test_responses_client.py" "http://127.0.0.1:$PORT/v1" \
  || ! "$PYTHON" "$HERE/test_agent_clients.py" "http://127.0.0.1:$PORT" \
  || ! "$PYTHON" "$HERE/test_anthropic_client.py" "http://127.0.0.1:$PORT"; then
  echo "server log:" >&2
  cat "$LOG" >&2
  exit 1
fi
