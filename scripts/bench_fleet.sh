#!/usr/bin/env bash
# The fleet's overhead: `kestrel bench` against a gateway with one worker vs against `kestrel
# serve`, same model, same engine threads, alternating ROUNDS times in one run: throughput with
# CONCURRENCY streams, and latency with one stream at a time (there TTFT is the server's own
# path, not queueing behind other requests, so the gateway's added milliseconds show). Needs
# redis-server. Prints a markdown table of medians and the ratios, with the triad bandwidth.
#
#   scripts/bench_fleet.sh [MODEL.gguf]
#
# Env: ROUNDS=3, CONCURRENCY=16, PROMPTS=32, INPUT_LEN=128, OUTPUT_LEN=128, THREADS=2, PORT=8511.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --release -q -p kestrel-cli
bin=./target/release/kestrel
model=${1:-$($bin fetch)}
rounds=${ROUNDS:-3}
threads=${THREADS:-2}
port=${PORT:-8511}
results=$(mktemp -d)
# shellcheck source=bench_server_lib.sh
source scripts/bench_server_lib.sh

redis_port=$((port + 100))
redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no >"$results/redis.log" 2>&1 &
redis_pid=$!
worker_pid=
cleanup() {
  stop_server
  [ -n "$worker_pid" ] && kill "$worker_pid" 2>/dev/null || true
  kill "$redis_pid" 2>/dev/null || true
}
trap cleanup EXIT
until redis-cli -p "$redis_port" ping >/dev/null 2>&1; do sleep 0.1; done

run_bench() { # name round
  "$bin" bench --base-url "http://127.0.0.1:$port" --concurrency "${CONCURRENCY:-16}" \
    --num-prompts "${PROMPTS:-32}" --input-len "${INPUT_LEN:-128}" --output-len "${OUTPUT_LEN:-128}" \
    --no-progress --json-out "$results/$1-$2.json" >/dev/null
  "$bin" bench --base-url "http://127.0.0.1:$port" --concurrency 1 \
    --num-prompts "${LATENCY_PROMPTS:-12}" --input-len "${INPUT_LEN:-128}" --output-len 16 \
    --no-progress --json-out "$results/$1-c1-$2.json" >/dev/null
}

for r in $(seq 1 "$rounds"); do
  port=$((port + 1))
  "$bin" serve --model "$model" --port "$port" --threads "$threads" >"$results/server.log" 2>&1 &
  server_pid=$!
  wait_ready
  run_bench serve "$r"
  stop_server

  port=$((port + 1))
  redis-cli -p "$redis_port" flushall >/dev/null
  "$bin" worker --redis-url "redis://127.0.0.1:$redis_port" --model "$model" --threads "$threads" \
    --worker-id "bench-$r" >"$results/worker.log" 2>&1 &
  worker_pid=$!
  "$bin" gateway --redis-url "redis://127.0.0.1:$redis_port" --port "$port" >"$results/server.log" 2>&1 &
  server_pid=$!
  wait_ready
  run_bench fleet "$r"
  stop_server
  kill "$worker_pid" 2>/dev/null || true
  wait "$worker_pid" 2>/dev/null || true
  worker_pid=
done
triad=$("$bin" membw -t "$threads" 2>/dev/null | awk -F'|' 'END { gsub(/ /, "", $3); print $3 " GB/s" }')

python3 - "$results" "$rounds" "$triad" <<'PY'
import json, statistics, sys
d, rounds, triad = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def load(which):
    return [json.load(open(f"{d}/{which}-{r}.json")) for r in range(1, rounds + 1)]
rows = [
    ("output tokens/s, concurrent", "", lambda b: b["output_throughput"]),
    ("TTFT p50 ms, concurrent", "", lambda b: b["ttft_ms"]["median_ms"]),
    ("TTFT p99 ms, concurrent", "", lambda b: b["ttft_ms"]["p99_ms"]),
    ("TPOT p50 ms, concurrent", "", lambda b: b["tpot_ms"]["median_ms"]),
    ("TTFT p50 ms, one at a time", "-c1", lambda b: b["ttft_ms"]["median_ms"]),
    ("TPOT p50 ms, one at a time", "-c1", lambda b: b["tpot_ms"]["median_ms"]),
]
print(f"triad bandwidth: {triad}; {rounds} alternating rounds, medians\n")
print("| metric | serve | gateway + 1 worker | ratio | difference |\n|---|---|---|---|---|")
for name, suffix, get in rows:
    a = statistics.median(get(x) for x in load("serve" + suffix))
    b = statistics.median(get(x) for x in load("fleet" + suffix))
    print(f"| {name} | {a:.1f} | {b:.1f} | {b / a:.3f} | {b - a:+.1f} |")
PY
