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
# Env: ROUNDS=6, CONCURRENCY=4, NUM_PROMPTS=16, INPUT_LEN=128, OUTPUT_LEN=64, THREADS=2;
# BASELINE=/path/to/an/older/kestrel adds a third server of that build (tracing off), so the
# cost of tracing-off against a build without the tracing code is measured in the same run.
# Prints one line per round and a summary (median output tokens/s of each, and the ratios).
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

start_serve() { # name port binary extra-args...
  local name=$1 port=$2 bin=$3
  shift 3
  $bin serve --model "$model" --port "$port" --threads "$threads" "$@" >"$results/$name.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 240); do
    curl -fs "http://127.0.0.1:$port/health" >/dev/null && return 0
    sleep 1
  done
  echo "serve ($name) did not start:" >&2
  tail -20 "$results/$name.log" >&2
  return 1
}

declare -A ports
names=(off on)
ports[off]=$(free_port)
start_serve off "${ports[off]}" "$kestrel"
ports[on]=$(free_port)
start_serve on "${ports[on]}" "$kestrel" --otlp-traces-endpoint "http://127.0.0.1:$sink_port"
if [[ -n ${BASELINE:-} ]]; then
  names+=(base)
  ports[base]=$(free_port)
  start_serve base "${ports[base]}" "$BASELINE"
fi

# Scrapes both every second for the whole run.
# Scrapes every server every second for the whole run; the time of each scrape of the current
# build (process, heap and KV gauges are read then) goes to scrape.times.
(while true; do
  for n in "${names[@]}"; do
    t=$(curl -fs -o /dev/null -w '%{time_total}' "http://127.0.0.1:${ports[$n]}/metrics" || true)
    [[ $n == off && -n $t ]] && echo "$t" >>"$results/scrape.times"
  done
  sleep 1
done) &
pids+=($!)

bench() { # name round
  $kestrel bench --base-url "http://127.0.0.1:${ports[$1]}" --concurrency "$conc" \
    --num-prompts "$prompts" --input-len "$in_len" --output-len "$out_len" --timeout 900 \
    --no-progress --seed "$2" --json-out "$results/$1-$2.json" >/dev/null
}

# One warm-up request set each, not counted.
for n in "${names[@]}"; do bench "$n" 0; done
count=${#names[@]}
for r in $(seq "$rounds"); do
  # The order rotates each round (and reverses every other), so no server always goes first.
  order=()
  for i in $(seq 0 $((count - 1))); do order+=("${names[$(( (i + r) % count ))]}"); done
  if (( r % 2 == 0 )); then order=($(printf '%s\n' "${order[@]}" | tac)); fi
  for n in "${order[@]}"; do bench "$n" "$r"; done
  python3 - "$results" "$r" "${names[@]}" <<'PY'
import json, sys
res, r, names = sys.argv[1], sys.argv[2], sys.argv[3:]
tput = {n: json.load(open(f"{res}/{n}-{r}.json"))["output_throughput"] for n in names}
line = ", ".join(f"{n} {t:.2f} tok/s" for n, t in tput.items())
ratios = f"on/off {tput['on'] / tput['off']:.4f}"
if "base" in tput:
    ratios += f", off/base {tput['off'] / tput['base']:.4f}"
print(f"round {r}: {line}, {ratios}")
PY
done

python3 - "$results" "$rounds" "${names[@]}" <<'PY'
import json, statistics, sys, os
res, rounds, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
get = lambda n: [json.load(open(f"{res}/{n}-{r}.json"))["output_throughput"] for r in range(1, rounds + 1)]
tput = {n: get(n) for n in names}
print("median output tok/s: " + ", ".join(f"{n} {statistics.median(v):.2f}" for n, v in tput.items()))
def ratio(a, b):
    rs = [y / x for x, y in zip(tput[a], tput[b])]
    print(f"{b}/{a} per round: median {statistics.median(rs):.4f}, min {min(rs):.4f}, max {max(rs):.4f}")
ratio("off", "on")
if "base" in tput:
    ratio("base", "off")
sent = open(f"{res}/sink.bytes").read() if os.path.exists(f"{res}/sink.bytes") else "0"
print(f"OTLP bytes received by the sink: {sent}")
times = sorted(float(t) * 1000 for t in open(f"{res}/scrape.times").read().split())
p = lambda q: times[min(len(times) - 1, int(q * len(times)))]
print(f"/metrics scrape of the tracing-off server (n={len(times)}): median {p(0.5):.2f} ms, "
      f"p99 {p(0.99):.2f} ms, max {times[-1]:.2f} ms")
PY
