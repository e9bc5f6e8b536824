#!/usr/bin/env bash
# Several models in one `kestrel serve`, two measurements on the same THREADS cores:
#  1. time to first token of a request whose model is not loaded (its load, and the unload of
#     the other model, included) against one whose model is loaded: one server with
#     --max-loaded-models 1, requests alternating a, a, b, b (cold, warm, cold, warm);
#  2. output throughput of the two models served together (one process, both loaded, a
#     `kestrel bench` against each at the same time) against each model served alone (a
#     single-model server).
# Prints a markdown report (with the CPU and each server's peak RSS).
#
#   scripts/bench_multi_model.sh [A.gguf B.gguf]
#
# Defaults: the default model (SmolLM2-135M) and Gemma 3 270M (scripts/fetch_gemma3_270m.sh).
# Env: ROUNDS=3 (cold/warm pairs per model), CONCURRENCY=4 (per model), NUM_PROMPTS=16 (per
# model), INPUT_LEN=128, OUTPUT_LEN=64, THREADS=2, PORT=8411.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p kestrel-cli
kestrel=${CARGO_TARGET_DIR:-target}/release/kestrel
model_a=${1:-$($kestrel fetch)}
model_b=${2:-${KESTREL_GEMMA3_270M:-$(scripts/fetch_gemma3_270m.sh)}}
rounds=${ROUNDS:-3}
conc=${CONCURRENCY:-4}
prompts=${NUM_PROMPTS:-16}
in_len=${INPUT_LEN:-128}
out_len=${OUTPUT_LEN:-64}
threads=${THREADS:-2}
port=${PORT:-8411}
results=$(mktemp -d)
# shellcheck source=bench_server_lib.sh
source scripts/bench_server_lib.sh

rss_mib() { awk '/VmHWM/ {printf "%.0f", $2 / 1024}' "/proc/$1/status"; }

# start_server NAME ARGS...: a fresh port and a server with ARGS, ready.
start_server() {
  local name=$1
  shift
  port=$((port + 1))
  server_log="$results/$name.log"
  $kestrel serve --port "$port" --threads "$threads" "$@" >"$server_log" 2>&1 &
  server_pid=$!
  wait_ready
}

# ttft MODEL: seconds to the first streamed token of a short greedy completion.
ttft() {
  python3 - "$port" "$1" <<'PY'
import json, sys, time, urllib.request
port, model = sys.argv[1:3]
body = json.dumps({"model": model, "prompt": "The three primary colors are", "max_tokens": 8,
                   "temperature": 0, "stream": True}).encode()
req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body,
                             {"Content-Type": "application/json"})
start = time.perf_counter()
with urllib.request.urlopen(req, timeout=600) as resp:
    for line in resp:
        if line.startswith(b"data: {"):
            print(f"{time.perf_counter() - start:.4f}")
            break
    for _ in resp:
        pass
PY
}

# bench NAME MODEL: `kestrel bench` against the running server, its report in NAME.json.
bench() {
  $kestrel bench --base-url "http://127.0.0.1:$port" --model "$2" --concurrency "$conc" \
    --num-prompts "$prompts" --input-len "$in_len" --output-len "$out_len" --timeout 900 \
    --no-progress --json-out "$results/$1.json" >/dev/null
}

# 1. Cold and warm first tokens, one slot.
start_server swap --model "a=$model_a" --model "b=$model_b" --max-loaded-models 1
for r in $(seq 1 "$rounds"); do
  for m in a b; do
    echo "$m cold $(ttft "$m")" >>"$results/ttft.txt"
    echo "$m warm $(ttft "$m")" >>"$results/ttft.txt"
  done
done
curl -s "http://127.0.0.1:$port/metrics" | grep -E '^kestrel:model_(loads|unloads)_total' >"$results/swaps.txt"
rss_mib "$server_pid" >"$results/swap.rss"
stop_server

# 2. Each model alone, then both together in one process.
for m in a b; do
  path=$model_a
  [ "$m" = b ] && path=$model_b
  start_server "alone-$m" --model "$path" --served-model-name "$m"
  ttft "$m" >/dev/null # load it
  bench "alone-$m" "$m"
  rss_mib "$server_pid" >"$results/alone-$m.rss"
  stop_server
done
start_server together --model "a=$model_a" --model "b=$model_b" --max-loaded-models 2
ttft a >/dev/null
ttft b >/dev/null
start=$(date +%s.%N)
bench together-a a &
bench_a=$!
bench together-b b
wait "$bench_a"
python3 -c "print($(date +%s.%N) - $start)" >"$results/together.wall"
rss_mib "$server_pid" >"$results/together.rss"
stop_server

python3 - "$results" "$model_a" "$model_b" "$threads" "$conc" "$prompts" "$in_len" "$out_len" <<'PY'
import json, os, statistics, subprocess, sys, datetime
res, a, b, threads, conc, prompts, in_len, out_len = sys.argv[1:9]
cpu = next((l.split(":", 1)[1].strip() for l in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
            if l.startswith("Model name")), "?")
names = {"a": os.path.basename(a), "b": os.path.basename(b)}
ttft = {}
for line in open(f"{res}/ttft.txt"):
    m, kind, secs = line.split()
    ttft.setdefault((m, kind), []).append(float(secs) * 1000)
def rep(name):
    return json.load(open(f"{res}/{name}.json"))
def rss(name):
    return open(f"{res}/{name}.rss").read().strip()
out = [f"### Several models in one process: {names['a']} (a) and {names['b']} (b), {threads} threads ({datetime.date.today()})",
       "", f"CPU: {cpu}. `scripts/bench_multi_model.sh`.", "",
       "Time to first token (8-token greedy completion, streamed), one slot (`--max-loaded-models 1`), "
       "requests alternating a, a, b, b: the first of each pair loads its model (unloading the other), the second finds it loaded. "
       f"Medians of {len(ttft[('a', 'cold')])} (min-max).", "",
       "| model | cold TTFT ms (load included) | warm TTFT ms | cold / warm |", "| --- | ---: | ---: | ---: |"]
for m in "ab":
    c, w = ttft[(m, "cold")], ttft[(m, "warm")]
    out.append(f"| {m}: {names[m]} | {statistics.median(c):.0f} ({min(c):.0f}-{max(c):.0f}) | "
               f"{statistics.median(w):.1f} ({min(w):.1f}-{max(w):.1f}) | {statistics.median(c) / statistics.median(w):.0f}x |")
swaps = open(f"{res}/swaps.txt").read().strip().replace("\n", "`, `")
out += ["", f"Swap counters after the run: `{swaps}`; peak RSS {rss('swap')} MiB.", "",
        f"Output throughput, `kestrel bench` with concurrency {conc} per model, {prompts} prompts per model of ~{in_len} tokens, "
        f"{out_len} output tokens; together: one process with both models loaded (`--max-loaded-models 2`), "
        "a bench against each at the same time.", "",
        "| served | a out tok/s | b out tok/s | total out tok/s | a TTFT p50 ms | b TTFT p50 ms | peak RSS MiB |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
aa, ab = rep("alone-a"), rep("alone-b")
out.append(f"| a alone | {aa['output_throughput']:.1f} | | {aa['output_throughput']:.1f} | {aa['ttft_ms']['median_ms']:.0f} | | {rss('alone-a')} |")
out.append(f"| b alone | | {ab['output_throughput']:.1f} | {ab['output_throughput']:.1f} | | {ab['ttft_ms']['median_ms']:.0f} | {rss('alone-b')} |")
ta, tb = rep("together-a"), rep("together-b")
wall = float(open(f"{res}/together.wall").read())
total = (ta["total_output_tokens"] + tb["total_output_tokens"]) / wall
out.append(f"| a + b together | {ta['output_throughput']:.1f} | {tb['output_throughput']:.1f} | {total:.1f} | "
           f"{ta['ttft_ms']['median_ms']:.0f} | {tb['ttft_ms']['median_ms']:.0f} | {rss('together')} |")
out += ["", f"Together, total = both benches' output tokens over the wall time of the two ({wall:.1f} s); "
        "each bench's own rate is over its own duration."]
print("\n".join(out))
PY
