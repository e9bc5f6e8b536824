#!/usr/bin/env bash
# LoRA decode cost: 16 sequences spread over 4 random rank-16 adapters (all seven projections
# of every layer, scripts/make_lora_adapter.py) against the same 16 sequences on the base
# alone, measured in one `kestrel speed` run with alternating repetitions; plus each adapter's
# load time. Runs on the default model and on any GGUFs given; prints a markdown table.
#
#   scripts/bench_lora.sh [MORE.gguf ...]
#
# SEQS (default 16), ADAPTERS (4), RANK (16), GEN (64), REPS (5) tune it.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p kestrel-cli
work=${WORK_DIR:-/tmp/kestrel-bench}
mkdir -p "$work"
seqs=${SEQS:-16} adapters=${ADAPTERS:-4} rank=${RANK:-16} gen=${GEN:-64} reps=${REPS:-5}
models=("$(./target/release/kestrel fetch)" "$@")
row='
import json, sys
r = json.load(sys.stdin)
l, tg = r["lora"], r["tg"]
loads = ", ".join("%.0f" % ms for ms in l["load_ms"])
print("| %s | %d | %.1f | %.1f | %.2fx | %s |" % (r["model"], r["threads"], tg["mean_tps"],
      l["tg"]["mean_tps"], l["cost"], loads))
'
echo "| model | threads | tg t/s, $seqs seqs, base | with $adapters rank-$rank adapters | time ratio | adapter load (ms) |"
echo "| --- | ---: | ---: | ---: | ---: | --- |"
for m in "${models[@]}"; do
    paths=()
    for i in $(seq 0 $((adapters - 1))); do
        d="$work/lora-r$rank-$(basename "$m" .gguf)-$i"
        [ -f "$d/adapter_config.json" ] || python3 scripts/make_lora_adapter.py "$m" "$d" --rank "$rank" --seed "$i" >&2
        paths+=("$d")
    done
    ./target/release/kestrel speed --model "$m" -p 0 -n "$gen" -r "$reps" --seqs "$seqs" \
        --threads "${THREADS:-2}" --json --lora "${paths[@]}" |
        python3 -c "$row"
done
