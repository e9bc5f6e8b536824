#!/usr/bin/env bash
# Side-by-side speed of Kestrel and llama.cpp on the same GGUF files, same machine, same threads,
# in one run (scripts/bench_side_by_side.py: alternating rounds, medians, STREAM triad before
# and after). Appends a dated markdown section to OUT.md (default docs/benchmarks.md).
#
#   scripts/bench_vs_llamacpp.sh LLAMA_CPP_BIN_DIR [OUT.md]
#
# Models: the default model (SmolLM2-135M-Instruct Q4_1) and its Q8_0 re-quantization by
# `kestrel quantize` (pp512 / tg128), and random-weight TinyLlama-1.1B-shape GGUFs
# (scripts/make_tinyllama_gguf.py) in Q4_0 and Q8_0 (pp$TINY_PP / tg128). Generated files go to
# $WORK_DIR (default /tmp/kestrel-bench) and are never committed. LLAMA_CPP_BIN_DIR holds a
# llama.cpp build's `llama-bench`. THREADS (2), REPS (2 per round), ROUNDS (3) set the method.
set -euo pipefail
cd "$(dirname "$0")/.."

bin_dir=${1:?usage: $0 LLAMA_CPP_BIN_DIR [OUT.md]}
out=${2:-docs/benchmarks.md}
tiny_pp=${TINY_PP:-512}
work=${WORK_DIR:-/tmp/kestrel-bench}
mkdir -p "$work"
cargo build --release -q -p kestrel-cli
kestrel=./target/release/kestrel

smol=$($kestrel fetch)
smol_q8="$work/SmolLM2-135M-Instruct.Q8_0.gguf"
[ -f "$smol_q8" ] || $kestrel quantize "$smol" "$smol_q8" --method q8_0 >&2
for t in q4_0 q8_0; do
    f="$work/tinyllama-shape-random.${t^^}.gguf"
    [ -f "$f" ] || python3 scripts/make_tinyllama_gguf.py "$f" --type "$t" >&2
done

python3 scripts/bench_side_by_side.py --llama-bin "$bin_dir" --kestrel "$kestrel" --out "$out" \
    --title "Kestrel vs llama.cpp" --threads "${THREADS:-2}" --reps "${REPS:-2}" \
    --rounds "${ROUNDS:-3}" \
    --model "$smol,pp=512,label=SmolLM2-135M Q4_1" \
    --model "$smol_q8,pp=512,label=SmolLM2-135M Q8_0" \
    --model "$work/tinyllama-shape-random.Q4_0.gguf,pp=$tiny_pp,label=TinyLlama-1.1B shape Q4_0" \
    --model "$work/tinyllama-shape-random.Q8_0.gguf,pp=$tiny_pp,label=TinyLlama-1.1B shape Q8_0"
