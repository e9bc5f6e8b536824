#!/usr/bin/env bash
# Soak test: starts `kestrel serve` (the default model) on a free loopback port and drives it
# with 64 concurrent clients for MINUTES minutes (default 30) through scripts/soak_driver.py:
# random parameters on every generation route (chat, completions, TGI), random stop strings,
# deliberately invalid requests (which must get exactly the expected 4xx), and clients that
# drop the connection mid-request (at least 10,000 per 30 minutes). It fails on any unexpected
# error, if the engine is not idle with every KV block back at the end (/metrics, including the
# engine's idle block-pool check), if the server's RSS grows more than 5% after the warm-up
# (the first 20% of the run), or if the server panics.
#
# Usage: scripts/soak.sh [MINUTES]
# Environment: KESTREL (default target/release/kestrel, not built here), KESTREL_DEFAULT_MODEL
# (default: what `kestrel fetch` returns), SOAK_RESULT (JSON result file, default
# target/soak/result.json), SOAK_NICE (default 19: server and driver run under `nice`),
# SOAK_MIN_CANCELLATIONS (default: 10,000 per 30 minutes, prorated), SOAK_WARMUP_FRACTION (default 0.2) and SOAK_RSS_TOLERANCE (default 0.05): RSS after the
# warm-up must stay within this share of the RSS at its end; SOAK_CONCURRENCY (default 64), SOAK_RATE (request starts per second over all clients,
# default 8: enough for the cancellations, little enough for a niced server on two shared
# cores to keep up), SOAK_SEED (default 1), PYTHON (default python3).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib/server.sh
source scripts/lib/server.sh

MINUTES="${1:-30}"
KESTREL="${KESTREL:-target/release/kestrel}"
PYTHON="${PYTHON:-python3}"
NICE="${SOAK_NICE:-19}"
RESULT="${SOAK_RESULT:-target/soak/result.json}"
mkdir -p "$(dirname "$RESULT")"

if ! "$PYTHON" -c 'import httpx' 2>/dev/null; then
  "$PYTHON" -m pip install --quiet httpx || "$PYTHON" -m pip install --quiet --break-system-packages httpx
fi
MODEL="${KESTREL_DEFAULT_MODEL:-$("$KESTREL" fetch)}"

PORT="$(free_port)"
LOG="$(mktemp)"
# The KV cache's pages become resident as its blocks are first written: it is kept small
# (2048 tokens, about 90 MiB for the default model) so that every block has been written
# within the warm-up even of the two-minute run, and RSS growth after it means a leak. 16
# sequences per step keep the 64 clients queueing, so waiting requests get cancelled too;
# steps of at most 256 tokens keep a niced server on busy cores taking commands (new
# requests, aborts) every few seconds rather than every half minute.
server_start "$LOG" nice -n "$NICE" "$KESTREL" serve "$MODEL" --hostname 127.0.0.1 --port "$PORT" \
  --kv-cache-tokens "${SOAK_KV_TOKENS:-2048}" --max-num-seqs 16 \
  --max-num-batched-tokens 256
cleanup() {
  server_stop_all
  rm -f "$LOG"
}
trap cleanup EXIT
server_wait_ready "$SERVER_PID" "$PORT" "$LOG"

echo "soak: $MINUTES min against $MODEL (server pid $SERVER_PID, port $PORT)"
status=0
nice -n "$NICE" "$PYTHON" scripts/soak_driver.py --base-url "http://127.0.0.1:$PORT" \
  --pid "$SERVER_PID" --minutes "$MINUTES" --concurrency "${SOAK_CONCURRENCY:-64}" \
  --seed "${SOAK_SEED:-1}" --rate "${SOAK_RATE:-8}" --result "$RESULT" --server-log "$LOG" \
  --warmup-fraction "${SOAK_WARMUP_FRACTION:-0.2}" --rss-tolerance "${SOAK_RSS_TOLERANCE:-0.05}" \
  --min-cancellations "${SOAK_MIN_CANCELLATIONS:--1}" \
  || status=$?
if ! kill -0 "$SERVER_PID" 2>/dev/null; then
  echo "soak: the server died" >&2
  status=1
fi
if [ "$status" -ne 0 ]; then
  server_log_tail "$LOG" 50
fi
echo "soak result: $RESULT"
exit $status
