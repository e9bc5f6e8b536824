#!/usr/bin/env bash
# Speculative decoding with n-gram prompt lookup on a copy-heavy task: `kestrel bench` against
# `kestrel serve` without and with `--speculative-method ngram`, at concurrency 1 and 16.
# Each request asks (chat endpoint, greedy) to repeat a paragraph given in the prompt, and ends
# at the model's end of sequence (`kestrel bench --stop-at-eos`), so the output is a copy of the
# prompt. Greedy decoding gives the same tokens with and without speculation. Prints a markdown
# table: output tokens/s end to end (prompt pass included), its speed-up, the decode speed-up
# (mean time per output token after the first, plain / ngram), mean output tokens per request,
# and the draft acceptance rate read from /metrics.
#
#   scripts/bench_speculative.sh [MODEL]
#
# THREADS (default 2), K (draft tokens, 4), GEN (cap on output tokens, 256), PORT (8471) tune
# it; SPEC_FLAGS adds flags to the speculating server (e.g. --speculative-fixed-length);
# IGNORE_EOS=1 restores fixed-length outputs of GEN tokens (the model goes on past the copy).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p kestrel-cli
kestrel=./target/release/kestrel
model=${1:-$($kestrel fetch)}
threads=${THREADS:-2} k=${K:-4} gen=${GEN:-256} port=${PORT:-8471}
eos_flag=(--stop-at-eos)
[ "${IGNORE_EOS:-0}" = 1 ] && eos_flag=()
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

run_mode() { # mode concurrency num_prompts -> "tps tpot_ms tokens_per_request accept"
  local mode=$1 c=$2 n=$3 flags=()
  # shellcheck disable=SC2206 # SPEC_FLAGS is a list of flags
  [ "$mode" = ngram ] && flags=(--speculative-method ngram --num-speculative-tokens "$k" ${SPEC_FLAGS:-})
  $kestrel serve --model "$model" --port "$port" --threads "$threads" --max-num-seqs 64 \
    "${flags[@]}" >"$results/server-$mode-$c.log" 2>&1 &
  server_pid=$!
  wait_ready
  $kestrel bench --base-url "http://127.0.0.1:$port" --endpoint /v1/chat/completions \
    --concurrency "$c" --num-prompts "$n" --prompts-file "$results/copy.jsonl" \
    --no-progress "${eos_flag[@]}" --json-out "$results/$mode-$c.json" >/dev/null
  local drafts accepted
  drafts=$(counter vllm:spec_decode_num_draft_tokens_total)
  accepted=$(counter vllm:spec_decode_num_accepted_tokens_total)
  stop_server
  python3 - "$results/$mode-$c.json" "${drafts:-0}" "${accepted:-0}" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
d, a = float(sys.argv[2]), float(sys.argv[3])
print("%.2f %.3f %.1f %s" % (r["output_throughput"], r["tpot_ms"]["mean_ms"],
      r["total_output_tokens"] / max(r["successful_requests"], 1),
      "%.0f%%" % (100 * a / d) if d else "-"))
PY
}

echo "| concurrency | requests | tokens/request | plain tok/s | ngram k=$k tok/s | speed-up | decode speed-up (TPOT) | drafts accepted |"
echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for cn in "1 16" "16 64"; do
  read -r c n <<<"$cn"
  read -r base base_tpot base_len _ <<<"$(run_mode off "$c" "$n")"
  read -r spec spec_tpot spec_len acc <<<"$(run_mode ngram "$c" "$n")"
  python3 -c "
import sys
b, s, bt, st = map(float, sys.argv[1:5])
print('| %s | %s | %s / %s | %.1f | %.1f | %.2fx | %.2fx | %s |' % (sys.argv[5], sys.argv[6],
      sys.argv[7], sys.argv[8], b, s, s / b, bt / st, sys.argv[9]))" \
    "$base" "$spec" "$base_tpot" "$spec_tpot" "$c" "$n" "$base_len" "$spec_len" "$acc"
done
