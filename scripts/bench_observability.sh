#!/usr/bin/env bash
# What the request signals and OpenTelemetry tracing cost in serving throughput: two `kestrel
# serve` processes of the same build on the same model, one without --otlp-traces-endpoint
# (tracing off: the client-side latency histogram and the process/heap gauges only) and one
# exporting every request's spans to a local OTLP/HTTP sink, benchmarked by `kestrel bench`
# in alternating rounds (the order flips each round) so that drift in the host's load hits
# both alike. Both servers are scraped on /metrics every second, as Prometheus would.
#
#   scripts/bench_observability.sh [MODEL.gguf]
#
# Env: ROUNDS=6, CONCURRENCY=4, NUM_PROMPTS=16, INPUT_LEN=128, OUTPUT_LEN=64, THREADS=2.
# Prints one line per round and a summary (median output tokens/s of each, and on/off ratio).
set -euo pipefail
cd "$(dirname "$0")/.."

kestrel=${KESTREL:-${CARGO_TARGET_DIR:-target}/release/kestrel}
model=${1:-$($kestrel fetch)}
rounds=${ROUNDS:-6}
conc=${CONCURRENCY:-4}
prompts=${NUM_PROMPTS:-16}
in_len=${INPUT_LEN:-128}
out_len=${OUTPUT_LEN:-64}
threads=${THREADS:-2}
results=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$results"; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# The OTLP/HTTP sink: accepts every export and counts the bytes it was sent.
sink_port=$(free_port)
python3 - "$sink_port" "$results/sink.bytes" <<'PY' &
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
port, out = int(sys.argv[1]), sys.argv[2]
total = 0
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        global total
        total += len(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        open(out, "w").write(str(total))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *a):
        pass
ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
PY
pids+=($!)

start_serve() { # name port extra-args...
  local name=$1 port=$2
  shift 2
  $kestrel serve --model "$model" --port "$port" --threads "$threads" "$@" >"$results/$name.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 240); do
    curl -fs "http://127.0.0.1:$port/health" >/dev/null && return 0
    sleep 1
  done
  echo "serve ($name) did not start:" >&2
  tail -20 "$results/$name.log" >&2
  return 1
}

off_port=$(free_port)
start_serve off "$off_port"
on_port=$(free_port)
start_serve on "$on_port" --otlp-traces-endpoint "http://127.0.0.1:$sink_port"

# Scrapes both every second for the whole run.
(while true; do
  curl -fs "http://127.0.0.1:$off_port/metrics" >/dev/null || true
  curl -fs "http://127.0.0.1:$on_port/metrics" >/dev/null || true
  sleep 1
done) &
pids+=($!)

bench() { # name port round
  $kestrel bench --base-url "http://127.0.0.1:$2" --concurrency "$conc" --num-prompts "$prompts" \
    --input-len "$in_len" --output-len "$out_len" --timeout 900 --no-progress --seed "$3" \
    --json-out "$results/$1-$3.json" >/dev/null
}

# One warm-up request set each, not counted.
bench off "$off_port" 0
bench on "$on_port" 0
for r in $(seq "$rounds"); do
  if (( r % 2 )); then
    bench off "$off_port" "$r"; bench on "$on_port" "$r"
  else
    bench on "$on_port" "$r"; bench off "$off_port" "$r"
  fi
  python3 - "$results" "$r" <<'PY'
import json, sys
res, r = sys.argv[1], sys.argv[2]
off = json.load(open(f"{res}/off-{r}.json"))["output_throughput"]
on = json.load(open(f"{res}/on-{r}.json"))["output_throughput"]
print(f"round {r}: off {off:.2f} tok/s, on {on:.2f} tok/s, on/off {on / off:.4f}")
PY
done

python3 - "$results" "$rounds" <<'PY'
import json, statistics, sys, os
res, rounds = sys.argv[1], int(sys.argv[2])
get = lambda n: [json.load(open(f"{res}/{n}-{r}.json"))["output_throughput"] for r in range(1, rounds + 1)]
off, on = get("off"), get("on")
ratios = [b / a for a, b in zip(off, on)]
sent = open(f"{res}/sink.bytes").read() if os.path.exists(f"{res}/sink.bytes") else "0"
print(f"median output tok/s: off {statistics.median(off):.2f}, on {statistics.median(on):.2f}")
print(f"on/off per round: median {statistics.median(ratios):.4f}, min {min(ratios):.4f}, max {max(ratios):.4f}")
print(f"OTLP bytes received by the sink: {sent}")
PY
