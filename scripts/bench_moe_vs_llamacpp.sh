#!/usr/bin/env bash
# Side-by-side speed of Kestrel and llama.cpp on a random-weight Mixtral-shape GGUF (8 experts,
# top-2, about 1.06 B parameters; scripts/make_mixtral_gguf.py), same machine, same threads, in
# one run (scripts/bench_side_by_side.py: alternating rounds, medians, STREAM triad before and
# after). Appends a dated markdown section to OUT.md (default: a new dated file under docs/benchmarks/).
#
#   scripts/bench_moe_vs_llamacpp.sh LLAMA_CPP_BIN_DIR [OUT.md]
#
# TYPES (default "q4_0 q8_0") picks the weight types; PP (default 128) the prompt length.
# tg GB/s counts the bytes a decode step reads: every weight but the experts, plus top-k of
# each layer's experts (0.30 B of the 1.06 B parameters).
set -euo pipefail
cd "$(dirname "$0")/.."

bin_dir=${1:?usage: $0 LLAMA_CPP_BIN_DIR [OUT.md]}
out=${2:-docs/benchmarks/$(date +%F)-moe-vs-llamacpp.md}
pp=${PP:-128}
types=${TYPES:-q4_0 q8_0}
work=${WORK_DIR:-/tmp/kestrel-bench}
mkdir -p "$work"
cargo build --release -q -p kestrel-cli

# Parameters a decode step reads: attention, router, 2 of 8 experts, head (the shape of
# make_mixtral_gguf.py; the embedding row is negligible).
H=1024 KV=256 F=3584 L=11 V=32000 E=8 K=2
active=$((L * (H * H * 2 + KV * H * 2 + E * H + K * 3 * H * F) + V * H))
models=()
for t in $types; do
    f="$work/mixtral-shape-random.${t^^}.gguf"
    [ -f "$f" ] || python3 scripts/make_mixtral_gguf.py "$f" --type "$t" >&2 2>/dev/null
    bits=$([ "$t" = q4_0 ] && echo 45 || echo 85) # tenths of a bit per weight
    models+=(--model "$f,pp=$pp,bytes=$((active * bits / 80)),label=Mixtral shape ${t^^}")
done

python3 scripts/bench_side_by_side.py --llama-bin "$bin_dir" --kestrel ./target/release/kestrel \
    --out "$out" --title "Mixture of experts: Kestrel vs llama.cpp" \
    --threads "${THREADS:-2}" --reps "${REPS:-2}" --rounds "${ROUNDS:-3}" \
    --note "Model: random-weight Mixtral shape (\`scripts/make_mixtral_gguf.py\`): $L layers, hidden $H, 8 experts of FFN $F, top-2, vocab $V; 1.06 B parameters, $active of them read per decode step." \
    "${models[@]}"
