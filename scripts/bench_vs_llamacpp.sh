#!/usr/bin/env bash
# Side-by-side speed of Kestrel and llama.cpp on the same GGUF files, same machine, same threads,
# in one run (scripts/bench_side_by_side.py: alternating rounds, medians, STREAM triad before
# and after, the llama.cpp version). Appends a dated markdown section to OUT.md (default
# a new dated file under docs/benchmarks/; docs/benchmarks.md links the current runs).
#
#   scripts/bench_vs_llamacpp.sh LLAMA_CPP_BIN_DIR [OUT.md]
#   BIG=1 scripts/bench_vs_llamacpp.sh LLAMA_CPP_BIN_DIR [OUT.md]   # also the 3B shape
#
# Models:
# - the default model (SmolLM2-135M-Instruct Q4_1) and its Q8_0 re-quantization by
#   `kestrel quantize` (pp512 / tg128);
# - random-weight TinyLlama-1.1B-shape GGUFs (scripts/make_tinyllama_gguf.py) in Q4_0, Q8_0,
#   Q4_K_M and Q6_K (pp$TINY_PP / tg128);
# - with BIG=1, a random-weight Llama-3.2-3B-shape GGUF (make_tinyllama_gguf.py --preset
#   llama-3.2-3b: hidden 3072, 28 layers, 24 / 8 KV heads of dim 128, FFN 8192, vocab 128256,
#   tied embeddings, rope theta 500000) in Q4_K_M (pp$BIG_PP / tg128). Off by default: the file
#   takes about 2 GB (and 6.4 GB of temporary F16 while it is made) and each round takes minutes.
# - at a depth of $DEPTH tokens already in the KV cache (default 8192; DEPTH=0 leaves these rows
#   out): the default model with f16 and with 8-bit KV, and a 1.1B-shape Q4_0 written with an
#   8192-token context (pp512 and tg128 after the depth, llama-bench's `-d`).
# - float weights: the default model dequantized to BF16, F16 and F32
#   (scripts/make_float_gguf.py) and a 1.1B-shape BF16 and F16 (make_tinyllama_gguf.py --type
#   bf16|f16), pp512 / tg128; FLOAT=0 leaves them out.
# Q4_0 and Q8_0 are written directly by the generator. The K-quant files are made the way
# llama.cpp users' files are: the generator writes an F16 GGUF and the llama.cpp build's own
# `llama-quantize` converts it (Q4_K_M: llama.cpp's mix of Q4_K with Q6_K for output /
# tied token_embd and some attn_v and ffn_down; Q6_K: all Q6_K), rather than
# `kestrel quantize --method q4_k`, which writes pure Q4_K. The F16 file is deleted afterwards.
#
# Generated files go to $WORK_DIR (default /tmp/kestrel-bench), are reused when present and are
# never committed. LLAMA_CPP_BIN_DIR holds a llama.cpp build's `llama-bench` and
# `llama-quantize`. THREADS (2), REPS (2 per round), ROUNDS (3) set the method; TINY_PP (512)
# and BIG_PP (512) the prompt lengths of the generated models; NOTE adds a line under the title.
set -euo pipefail
cd "$(dirname "$0")/.."

bin_dir=${1:?usage: $0 LLAMA_CPP_BIN_DIR [OUT.md]}
out=${2:-docs/benchmarks/$(date +%F)-vs-llamacpp.md}
tiny_pp=${TINY_PP:-512}
big_pp=${BIG_PP:-512}
work=${WORK_DIR:-/tmp/kestrel-bench}
mkdir -p "$work"
cargo build --release -q -p kestrel-cli
kestrel=./target/release/kestrel

# kquants PRESET STEM TYPE...: makes each missing $work/STEM.TYPE.gguf with llama-quantize from
# an F16 file of the generator's PRESET shape (made if needed, deleted afterwards).
kquants() {
    local preset=$1 stem=$2 t missing=()
    shift 2
    for t in "$@"; do
        [ -f "$work/$stem.$t.gguf" ] || missing+=("$t")
    done
    [ ${#missing[@]} -gt 0 ] || return 0
    [ -x "$bin_dir/llama-quantize" ] || { echo "no llama-quantize in $bin_dir" >&2; exit 1; }
    local f16="$work/$stem.F16.gguf"
    if [ ! -f "$f16" ]; then
        python3 scripts/make_tinyllama_gguf.py "$f16.partial" --type f16 --preset "$preset" >&2
        mv "$f16.partial" "$f16"
    fi
    for t in "${missing[@]}"; do
        local f="$work/$stem.$t.gguf" log="$work/$stem.$t.quantize.log"
        echo "llama-quantize $f16 -> $f" >&2
        "$bin_dir/llama-quantize" "$f16" "$f.partial" "$t" "$(nproc)" >"$log" 2>&1 \
            || { tail -n 20 "$log" >&2; exit 1; }
        mv "$f.partial" "$f"
    done
    rm -f "$f16"
}

smol=$($kestrel fetch)
smol_q8="$work/SmolLM2-135M-Instruct.Q8_0.gguf"
[ -f "$smol_q8" ] || $kestrel quantize "$smol" "$smol_q8" --method q8_0 >&2
tiny="$work/tinyllama-shape-random"
for t in q4_0 q8_0; do
    f="$tiny.${t^^}.gguf"
    [ -f "$f" ] || python3 scripts/make_tinyllama_gguf.py "$f" --type "$t" >&2
done
kquants tinyllama tinyllama-shape-random Q4_K_M Q6_K
depth=${DEPTH:-8192}
tiny_long="$work/tinyllama-shape-random-ctx$((depth + 1024)).Q4_0.gguf"
if [ "$depth" -gt 0 ] && [ ! -f "$tiny_long" ]; then
    python3 scripts/make_tinyllama_gguf.py "$tiny_long" --type q4_0 --context "$((depth + 1024))" >&2
fi

float_models=()
if [ "${FLOAT:-1}" = 1 ]; then
    for t in bf16 f16 f32; do
        f="$work/SmolLM2-135M-Instruct.${t^^}.gguf"
        [ -f "$f" ] || python3 scripts/make_float_gguf.py "$smol" "$f" --type "$t" >&2
        float_models+=(--model "$f,pp=512,label=SmolLM2-135M ${t^^}")
    done
    for t in bf16 f16; do
        f="$tiny.${t^^}.gguf"
        [ -f "$f" ] || python3 scripts/make_tinyllama_gguf.py "$f" --type "$t" >&2
        float_models+=(--model "$f,pp=$tiny_pp,label=TinyLlama-1.1B shape ${t^^}")
    done
fi

models=(
    --model "$smol,pp=512,label=SmolLM2-135M Q4_1"
    --model "$smol_q8,pp=512,label=SmolLM2-135M Q8_0"
    --model "$tiny.Q4_0.gguf,pp=$tiny_pp,label=TinyLlama-1.1B shape Q4_0"
    --model "$tiny.Q8_0.gguf,pp=$tiny_pp,label=TinyLlama-1.1B shape Q8_0"
    --model "$tiny.Q4_K_M.gguf,pp=$tiny_pp,label=TinyLlama-1.1B shape Q4_K_M"
    --model "$tiny.Q6_K.gguf,pp=$tiny_pp,label=TinyLlama-1.1B shape Q6_K"
    "${float_models[@]}"
)
if [ "$depth" -gt 0 ]; then
    models+=(
        --model "$smol,pp=512,depth=$depth,label=SmolLM2-135M Q4_1 (f16 KV)"
        --model "$smol,pp=512,depth=$depth,kv=q8,label=SmolLM2-135M Q4_1 (8-bit KV)"
        --model "$tiny_long,pp=512,depth=$depth,label=TinyLlama-1.1B shape Q4_0 (f16 KV)"
    )
fi
if [ "${BIG:-0}" = 1 ]; then
    kquants llama-3.2-3b llama-3.2-3b-shape-random Q4_K_M
    big="$work/llama-3.2-3b-shape-random.Q4_K_M.gguf"
    models+=(--model "$big,pp=$big_pp,label=Llama-3.2-3B shape Q4_K_M")
fi

python3 scripts/bench_side_by_side.py --llama-bin "$bin_dir" --kestrel "$kestrel" --out "$out" \
    --title "Kestrel vs llama.cpp" --threads "${THREADS:-2}" --reps "${REPS:-2}" \
    --rounds "${ROUNDS:-3}" ${NOTE:+--note "$NOTE"} "${models[@]}"
