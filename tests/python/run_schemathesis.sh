#!/usr/bin/env bash
# Property-based API testing of `kestrel serve` with schemathesis, from its own /openapi.json:
# every operation, first with the API key, then without it (every protected route must then
# answer a documented 401). Checks: no 5xx, and every response conforms to the document
# (status code, content type, headers, body schema). These five are what `--checks all` meant
# in schemathesis 3; schemathesis 4's `all` adds checks of how strictly inputs are validated
# (positive/negative data acceptance and others), which this does not ask for.
#
# Usage: run_schemathesis.sh PATH/TO/kestrel
# Uses the default model (KESTREL_DEFAULT_MODEL if set, else `kestrel serve`'s default). The
# server caps prompt + output at 64 tokens (--max-total-tokens) so generation examples finish
# fast. SCHEMATHESIS_MAX_EXAMPLES (default 15) bounds the examples per operation and phase.
# Builds nothing; installs schemathesis with pip if it is missing; always stops the server.
set -euo pipefail

KESTREL="${1:?usage: $0 PATH/TO/kestrel}"
PYTHON="${PYTHON:-python3}"
# shellcheck source=../../scripts/lib/server.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib/server.sh"
MAX_EXAMPLES="${SCHEMATHESIS_MAX_EXAMPLES:-15}"
KEY="schemathesis-test-key"

if ! command -v schemathesis >/dev/null 2>&1; then
  "$PYTHON" -m pip install --quiet schemathesis \
    || "$PYTHON" -m pip install --quiet --break-system-packages schemathesis
fi

PORT="$(free_port)"
WORK="$(mktemp -d)"
LOG="$WORK/server.log"
MODEL_ARGS=()
if [[ -n "${KESTREL_DEFAULT_MODEL:-}" ]]; then
  MODEL_ARGS=(--model "$KESTREL_DEFAULT_MODEL")
fi

cleanup() {
  server_stop_all
  rm -rf "$WORK"
}
trap cleanup EXIT
server_start "$LOG" "$KESTREL" serve "${MODEL_ARGS[@]}" --hostname 127.0.0.1 --port "$PORT" \
  --api-key "$KEY" --max-total-tokens 64 --kv-cache-tokens 4096
server_wait_ready "$SERVER_PID" "$PORT" "$LOG"
BASE="http://127.0.0.1:$PORT"

# The document itself is behind the key; the keyless run reads a copy.
"$PYTHON" - "$BASE/openapi.json" "$KEY" "$WORK/openapi.json" <<'EOF'
import sys, urllib.request
req = urllib.request.Request(sys.argv[1], headers={"Authorization": f"Bearer {sys.argv[2]}"})
with urllib.request.urlopen(req, timeout=10) as r, open(sys.argv[3], "wb") as f:
    f.write(r.read())
EOF

CHECKS=not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance
COMMON=(--checks "$CHECKS" --max-examples "$MAX_EXAMPLES" --seed 1 --workers 2
  --request-timeout 120 --suppress-health-check all --no-color
  --generation-database none)

status=0
cd "$WORK"  # schemathesis keeps a cache directory in the working directory
echo "schemathesis with the API key"
schemathesis run "$WORK/openapi.json" --url "$BASE" -H "Authorization: Bearer $KEY" \
  "${COMMON[@]}" || status=$?
echo "schemathesis without the API key"
schemathesis run "$WORK/openapi.json" --url "$BASE" "${COMMON[@]}" || status=$?

if ! kill -0 "$SERVER_PID" 2>/dev/null; then
  echo "kestrel serve died during the run" >&2
  status=1
fi
if grep -q panicked "$LOG"; then
  echo "the server log reports a panic" >&2
  status=1
fi
if [ "$status" -ne 0 ]; then
  server_log_tail "$LOG" 40
fi
exit $status
