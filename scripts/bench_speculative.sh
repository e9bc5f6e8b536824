#!/usr/bin/env bash
# Speculative decoding with n-gram prompt lookup on a copy-heavy task: `kestrel bench` against
# `kestrel serve` without and with `--speculative-method ngram`, at concurrency 1 and 16.
# Each request asks (chat endpoint, greedy) to repeat a paragraph given in the prompt, so most
# of the output is a copy of the prompt. Prints a markdown table: output tokens/s, speed-up,
# and the draft acceptance rate read from /metrics.
#
#   scripts/bench_speculative.sh [MODEL]
#
# THREADS (default 2), K (draft tokens, 4), GEN (output tokens, 96), PORT (8471) tune it.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p kestrel-cli
kestrel=./target/release/kestrel
model=${1:-$($kestrel fetch)}
threads=${THREADS:-2} k=${K:-4} gen=${GEN:-96} port=${PORT:-8471}
results=${RESULTS:-/tmp/kestrel-bench-spec}
mkdir -p "$results"
# shellcheck source=bench_server_lib.sh
source scripts/bench_server_lib.sh

python3 - "$results/copy.jsonl" "$gen" <<'PY'
import json, sys
paragraphs = [
    "Keepers lived in small houses at the foot of each tower, trimming wicks every few hours through the night, recording the weather, and rowing out to help sailors in trouble. Today most lights are automatic: solar panels charge batteries, and a computer switches the lamp on at dusk.",
    "Bread is made from flour, water, salt and yeast. The dough is kneaded until it is smooth and elastic, left to rise in a warm place, shaped into loaves and baked in a hot oven until the crust is brown and the loaf sounds hollow when tapped.",
    "Rivers carve valleys over millions of years, carrying sand to the sea, where it settles in layers that slowly turn into rock. Birds migrate thousands of kilometres each autumn, finding their way by the sun, the stars and the magnetic field of the Earth.",
    "A good cup of tea needs freshly boiled water, a warmed pot and a few minutes of patience before pouring. Milk goes in after the tea, never before, and a biscuit on the side is a small but important pleasure of the afternoon.",
]
with open(sys.argv[1], "w") as f:
    for i in range(64):
        p = paragraphs[i % len(paragraphs)]
        prompt = f"Repeat the following paragraph exactly, word for word, then stop.\n\n{p}"
        f.write(json.dumps({"prompt": prompt, "output_len": int(sys.argv[2])}) + "\n")
PY

counter() { curl -sf "http://127.0.0.1:$port/metrics" | awk -v n="$1" '$1 == n {print $2}' | tail -1; }

run_mode() { # mode concurrency num_prompts -> "tps accept"
  local mode=$1 c=$2 n=$3 flags=()
  [ "$mode" = ngram ] && flags=(--speculative-method ngram --num-speculative-tokens "$k")
  $kestrel serve --model "$model" --port "$port" --threads "$threads" --max-num-seqs 64 \
    "${flags[@]}" >"$results/server-$mode-$c.log" 2>&1 &
  server_pid=$!
  wait_ready
  $kestrel bench --base-url "http://127.0.0.1:$port" --endpoint /v1/chat/completions \
    --concurrency "$c" --num-prompts "$n" --prompts-file "$results/copy.jsonl" \
    --no-progress --json-out "$results/$mode-$c.json" >/dev/null
  local drafts accepted
  drafts=$(counter vllm:spec_decode_num_draft_tokens_total)
  accepted=$(counter vllm:spec_decode_num_accepted_tokens_total)
  stop_server
  python3 - "$results/$mode-$c.json" "${drafts:-0}" "${accepted:-0}" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
d, a = float(sys.argv[2]), float(sys.argv[3])
print("%.2f %s" % (r["output_throughput"], "%.0f%%" % (100 * a / d) if d else "-"))
PY
}

echo "| concurrency | requests | plain tok/s | ngram k=$k tok/s | speed-up | drafts accepted |"
echo "| ---: | ---: | ---: | ---: | ---: | ---: |"
for cn in "1 8" "16 48"; do
  read -r c n <<<"$cn"
  read -r base _ <<<"$(run_mode off "$c" "$n")"
  read -r spec acc <<<"$(run_mode ngram "$c" "$n")"
  python3 -c "import sys; b, s = map(float, sys.argv[1:3]); print('| %s | %s | %.1f | %.1f | %.2fx | %s |' % (sys.argv[3], sys.argv[4], b, s, s / b, sys.argv[5]))" \
    "$base" "$spec" "$c" "$n" "$acc"
done
