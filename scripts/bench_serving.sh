#!/usr/bin/env bash
# Serving throughput, side by side: `kestrel bench` against `kestrel serve` and against
# llama.cpp's `llama-server` (same model file, same threads, -np equal to the concurrency),
# at several concurrency levels, in one run. Appends a markdown table to a dated file under docs/benchmarks/ and
# writes each run's latency and throughput plots to docs/plots/serving_<server>_c<level>.svg.
#
#   scripts/bench_serving.sh LLAMA_CPP_BIN_DIR [MODEL.gguf]
#
# Each level sends max(8, concurrency) requests.
# Env: CONCURRENCY="1 4 16 64 128", INPUT_LEN=128, OUTPUT_LEN=128, THREADS=2, PORT=8311.
set -euo pipefail
cd "$(dirname "$0")/.."

bin_dir=${1:?usage: $0 LLAMA_CPP_BIN_DIR [MODEL.gguf]}
cargo build --release -q -p kestrel-cli
kestrel=./target/release/kestrel
model=${2:-$($kestrel fetch)}
levels=${CONCURRENCY:-1 4 16 64 128}
in_len=${INPUT_LEN:-128}
out_len=${OUTPUT_LEN:-128}
threads=${THREADS:-2}
port=${PORT:-8311}
results=$(mktemp -d)
mkdir -p docs/plots
# shellcheck source=bench_server_lib.sh
source scripts/bench_server_lib.sh

rss_kib() { awk '/VmHWM/ {print $2}' "/proc/$1/status"; }

run_level() { # name concurrency
  local name=$1 c=$2 n=$(( $2 < 8 ? 8 : $2 ))
  $kestrel bench --base-url "http://127.0.0.1:$port" --concurrency "$c" --num-prompts "$n" \
    --input-len "$in_len" --output-len "$out_len" --timeout 900 --no-progress --json-out "$results/$name-$c.json" \
    --plot "docs/plots/serving_${name}_c$c.svg" >/dev/null
  echo "$(rss_kib "$server_pid")" > "$results/$name-$c.rss"
}

# A fresh port for every server start: a server that is still draining its connections must not
# make the next one fail to bind.
for c in $levels; do
  port=$((port + 1))
  $kestrel serve --model "$model" --port "$port" --threads "$threads" --max-num-seqs "$(( c > 64 ? c : 64 ))" >"$results/server.log" 2>&1 &
  server_pid=$!
  wait_ready
  run_level kestrel "$c"
  stop_server
  port=$((port + 1))
  "$bin_dir/llama-server" -m "$model" --port "$port" -t "$threads" -np "$c" -c $(( c * (in_len + out_len + 64) )) >"$results/server.log" 2>&1 &
  server_pid=$!
  wait_ready
  run_level llama "$c"
  stop_server
done

python3 - "$results" "$model" "$threads" "$in_len" "$out_len" "$levels" <<'PY'
import json, os, sys, datetime
res, model, threads, in_len, out_len, levels = sys.argv[1:7]
def load(name, c):
    r = json.load(open(f"{res}/{name}-{c}.json"))
    rss = int(open(f"{res}/{name}-{c}.rss").read().strip() or 0)
    return r, rss
def get(r, *path):
    for p in path:
        r = r[p]
    return r
lines = [f"### Serving: {os.path.basename(model)}, {threads} threads, prompts ~{in_len} tokens, {out_len} output tokens ({datetime.date.today()})",
         "",
         "`kestrel bench` against each server in turn; llama-server runs with `-np` equal to the concurrency. "
         f"Plots: docs/plots/serving_kestrel_c<level>.svg, e.g. [concurrency {levels.split()[-1]}](../plots/serving_kestrel_c{levels.split()[-1]}.svg).",
         "",
         "| concurrency | Kestrel out tok/s | llama.cpp out tok/s | ratio | Kestrel TTFT p50 / p99 ms | llama.cpp TTFT p50 / p99 ms | Kestrel peak RSS MiB | llama.cpp peak RSS MiB |",
         "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
for c in levels.split():
    k, krss = load("kestrel", c)
    l, lrss = load("llama", c)
    kt, lt = k["output_throughput"], l["output_throughput"]
    lines.append(f"| {c} | {kt:.1f} | {lt:.1f} | {kt / lt:.2f}x | {k['ttft_ms']['median_ms']:.0f} / {k['ttft_ms']['p99_ms']:.0f} | "
                 f"{l['ttft_ms']['median_ms']:.0f} / {l['ttft_ms']['p99_ms']:.0f} | {krss / 1024:.0f} | {lrss / 1024:.0f} |")
report = "\n".join(lines) + "\n"
print(report)
out = datetime.date.today().strftime("docs/benchmarks/%Y-%m-%d-serving.md")
existing = open(out).read() if os.path.exists(out) else ""
open(out, "w").write(existing.rstrip() + "\n\n" + report)
PY
