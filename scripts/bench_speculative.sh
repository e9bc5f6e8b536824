#!/usr/bin/env bash
# Speculative decoding with n-gram prompt lookup on a copy-heavy task: `kestrel bench` against
# `kestrel serve` without and with `--speculative-method ngram`, at concurrency 1 and 16.
# Each request asks (chat endpoint, greedy) to repeat a paragraph given in the prompt, and ends
# at the model's end of sequence (`kestrel bench --stop-at-eos`), so the output is a copy of the
# prompt. Greedy decoding gives the same tokens with and without speculation. Prints a markdown
# table: output tokens/s end to end (prompt pass included), its speed-up, the decode speed-up
# (mean time per output token after the first, plain / ngram), mean output tokens per request,
# and the draft acceptance rate read from /metrics; beside them the same n-gram speculation
# with fixed draft lengths (--speculative-fixed-length). The three servers run side by side and
# the benchmark alternates between them for ROUNDS (3) rounds; the table has the medians.
#
#   scripts/bench_speculative.sh [MODEL]
#
# THREADS (default 2), K (draft tokens, 4), GEN (cap on output tokens, 256), ROUNDS (3) and
# PORT (8471, and the next two) tune it; SPEC_FLAGS adds flags to the adaptive n-gram server;
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

counter() { curl -sf "http://127.0.0.1:$1/metrics" | awk -v n="$2" '$1 == n {print $2}' | tail -1; }

# Three servers, up together (an idle server takes no CPU): plain decoding, n-gram speculation
# with adaptive draft lengths (the default) and with --speculative-fixed-length.
modes=(off ngram fixed)
declare -A mode_port
pids=()
i=0
for mode in "${modes[@]}"; do
  flags=()
  # shellcheck disable=SC2206 # SPEC_FLAGS is a list of flags
  case $mode in
    ngram) flags=(--speculative-method ngram --num-speculative-tokens "$k" ${SPEC_FLAGS:-}) ;;
    fixed) flags=(--speculative-method ngram --num-speculative-tokens "$k" --speculative-fixed-length) ;;
  esac
  mode_port[$mode]=$((port + i)); i=$((i + 1))
  $kestrel serve --model "$model" --port "${mode_port[$mode]}" --threads "$threads" \
    --max-num-seqs 64 "${flags[@]}" >"$results/server-$mode.log" 2>&1 &
  pids+=($!)
done
trap 'kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true' EXIT
for mode in "${modes[@]}"; do
  for _ in $(seq 1 480); do
    curl -sf "http://127.0.0.1:${mode_port[$mode]}/health" >/dev/null 2>&1 && break
    sleep 0.5
  done
done

# One bench run: writes $results/MODE-C-ROUND.json and appends "MODE C drafts accepted" (the
# counter increments during the run) to $results/accept.txt.
run_one() {
  local mode=$1 c=$2 n=$3 r=$4 p=${mode_port[$1]} d0 a0 d1 a1
  d0=$(counter "$p" vllm:spec_decode_num_draft_tokens_total); a0=$(counter "$p" vllm:spec_decode_num_accepted_tokens_total)
  $kestrel bench --base-url "http://127.0.0.1:$p" --endpoint /v1/chat/completions \
    --concurrency "$c" --num-prompts "$n" --prompts-file "$results/copy.jsonl" \
    --no-progress "${eos_flag[@]}" --json-out "$results/$mode-$c-$r.json" >/dev/null
  d1=$(counter "$p" vllm:spec_decode_num_draft_tokens_total); a1=$(counter "$p" vllm:spec_decode_num_accepted_tokens_total)
  echo "$mode $c $(( ${d1:-0} - ${d0:-0} )) $(( ${a1:-0} - ${a0:-0} ))" >>"$results/accept.txt"
}

rounds=${ROUNDS:-3}
: >"$results/accept.txt"
triad=$($kestrel membw -t "$threads" 2>/dev/null | awk -F'|' 'END { gsub(/ /, "", $3); print $3 " GB/s" }')
for cn in "1 16" "16 64"; do
  read -r c n <<<"$cn"
  for r in $(seq 1 "$rounds"); do
    for mode in "${modes[@]}"; do run_one "$mode" "$c" "$n" "$r"; done
  done
done

python3 - "$results" "$rounds" "$k" "$triad" <<'PY'
import json, statistics, sys
results, rounds, k, triad = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
acc = {}
for line in open(f"{results}/accept.txt"):
    mode, c, d, a = line.split()
    dd, aa = acc.get((mode, c), (0, 0))
    acc[(mode, c)] = (dd + int(d), aa + int(a))
def med(mode, c, f):
    return statistics.median(f(json.load(open(f"{results}/{mode}-{c}-{r}.json"))) for r in range(1, rounds + 1))
def rate(mode, c):
    d, a = acc.get((mode, c), (0, 0))
    return "%.0f%%" % (100 * a / d) if d else "-"
print(f"Medians of {rounds} alternating rounds; k = {k}; triad bandwidth {triad}.")
print()
print("| concurrency | requests | tokens/request | plain tok/s | ngram tok/s | speed-up | decode speed-up (TPOT) | drafts accepted | fixed-length ngram tok/s | speed-up | drafts accepted |")
print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for c, n in (("1", 16), ("16", 64)):
    tput = lambda m: med(m, c, lambda r: r["output_throughput"])
    tpot = lambda m: med(m, c, lambda r: r["tpot_ms"]["mean_ms"])
    toks = med("off", c, lambda r: r["total_output_tokens"] / max(r["successful_requests"], 1))
    b, s, f = tput("off"), tput("ngram"), tput("fixed")
    print("| %s | %d | %.1f | %.1f | %.1f | %.2fx | %.2fx | %s | %.1f | %.2fx | %s |" % (
        c, n, toks, b, s, s / b, tpot("off") / tpot("ngram"), rate("ngram", c), f, f / b, rate("fixed", c)))
PY
