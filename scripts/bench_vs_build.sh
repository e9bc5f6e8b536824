#!/usr/bin/env bash
# Same-run comparison of this checkout's `kestrel` with another build of it (for example the
# commit before a refactor): `kestrel speed` (pp/tg tokens/s) and `kestrel bench` against
# `kestrel serve`, alternating the two binaries ROUNDS times so drift affects both alike.
# Prints a markdown table of medians and the new/old ratio (overall and per round, so the
# spread between rounds is visible), with the triad bandwidth.
#
#   scripts/bench_vs_build.sh OLD_KESTREL_BINARY [MODEL.gguf]
#
# Env: ROUNDS=3, PP=512, TG=128, CONCURRENCY=16, PROMPTS=32, INPUT_LEN=128, OUTPUT_LEN=128,
#      THREADS=2, PORT=8411.
set -euo pipefail
cd "$(dirname "$0")/.."

old=${1:?usage: $0 OLD_KESTREL_BINARY [MODEL.gguf]}
cargo build --release -q -p kestrel-cli
new=./target/release/kestrel
model=${2:-$($new fetch)}
rounds=${ROUNDS:-3}
threads=${THREADS:-2}
port=${PORT:-8411}
results=$(mktemp -d)
# shellcheck source=bench_server_lib.sh
source scripts/bench_server_lib.sh

serve_bench() { # binary out.json
  port=$((port + 1))
  "$1" serve --model "$model" --port "$port" --threads "$threads" >"$results/server.log" 2>&1 &
  server_pid=$!
  wait_ready
  "$new" bench --base-url "http://127.0.0.1:$port" --concurrency "${CONCURRENCY:-16}" \
    --num-prompts "${PROMPTS:-32}" --input-len "${INPUT_LEN:-128}" --output-len "${OUTPUT_LEN:-128}" \
    --no-progress --json-out "$2" >/dev/null
  stop_server
}

for r in $(seq 1 "$rounds"); do
  for which in old new; do
    bin=$old; [ "$which" = new ] && bin=$new
    "$bin" speed --model "$model" -p "${PP:-512}" -n "${TG:-128}" -t "$threads" --json \
      >"$results/speed-$which-$r.json" 2>/dev/null
    serve_bench "$bin" "$results/serve-$which-$r.json"
  done
done
triad=$("$new" membw -t "$threads" 2>/dev/null | awk -F'|' 'END { gsub(/ /, "", $3); print $3 " GB/s" }')

python3 - "$results" "$rounds" "$triad" <<'PY'
import json, statistics, sys
d, rounds, triad = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def load(kind, which):
    return [json.load(open(f"{d}/{kind}-{which}-{r}.json")) for r in range(1, rounds + 1)]
rows = [
    ("pp tokens/s", lambda s: s["pp"]["mean_tps"], "speed"),
    ("tg tokens/s", lambda s: s["tg"]["mean_tps"], "speed"),
    ("serving output tokens/s", lambda b: b["output_throughput"], "serve"),
    ("serving TTFT p50 ms", lambda b: b["ttft_ms"]["median_ms"], "serve"),
    ("serving TTFT p99 ms", lambda b: b["ttft_ms"]["p99_ms"], "serve"),
    ("serving TPOT p50 ms", lambda b: b["tpot_ms"]["median_ms"], "serve"),
]
print(f"triad bandwidth: {triad}; {rounds} alternating rounds, medians\n")
print("| metric | old | new | new/old | new/old per round |\n|---|---|---|---|---|")
for name, get, kind in rows:
    olds = [get(x) for x in load(kind, "old")]
    news = [get(x) for x in load(kind, "new")]
    old, new = statistics.median(olds), statistics.median(news)
    per_round = " ".join(f"{n / o:.2f}" for o, n in zip(olds, news))
    print(f"| {name} | {old:.1f} | {new:.1f} | {new / old:.3f} | {per_round} |")
PY
