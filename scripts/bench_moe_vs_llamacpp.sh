#!/usr/bin/env bash
# Side-by-side speed of Kestrel and llama.cpp on a random-weight Mixtral-shape GGUF (8 experts,
# top-2, about 1.06 B parameters; scripts/make_mixtral_gguf.py), same machine, same threads,
# measured in one run with the machine's memory bandwidth (STREAM triad) and load average.
# Appends a dated markdown section to OUT.md (default docs/benchmarks.md).
#
#   scripts/bench_moe_vs_llamacpp.sh LLAMA_CPP_BIN_DIR [OUT.md]
#
# TYPES (default "q4_0 q8_0") picks the weight types; PP (default 128) the prompt length.
# tg GB/s counts the bytes a decode step reads: every weight but the experts, plus top-k of
# each layer's experts (0.30 B of the 1.06 B parameters).
set -euo pipefail
cd "$(dirname "$0")/.."

bin_dir=${1:?usage: $0 LLAMA_CPP_BIN_DIR [OUT.md]}
out=${2:-docs/benchmarks.md}
threads=${THREADS:-2}
reps=${REPS:-3}
pp=${PP:-128}
types=${TYPES:-q4_0 q8_0}
work=${WORK_DIR:-/tmp/kestrel-bench}
mkdir -p "$work"
cargo build --release -q -p kestrel-cli
kestrel=./target/release/kestrel
for t in $types; do
    f="$work/mixtral-shape-random.${t^^}.gguf"
    [ -f "$f" ] || python3 scripts/make_mixtral_gguf.py "$f" --type "$t" >&2 2>/dev/null
done

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
membw=$($kestrel membw -t "1,$threads" --json)
results="$work/moe-results.jsonl"
: >"$results"
for t in $types; do
    f="$work/mixtral-shape-random.${t^^}.gguf"
    l=$("$bin_dir/llama-bench" -m "$f" -p "$pp" -n 128 -t "$threads" -r "$reps" -o json 2>/dev/null)
    k=$($kestrel speed --model "$f" -p "$pp" -n 128 -t "$threads" -r "$reps" --json)
    python3 -c 'import json,sys; print(json.dumps({"type": sys.argv[1], "llama": json.loads(sys.argv[2]), "kestrel": json.loads(sys.argv[3])}))' \
        "$t" "$l" "$k" >>"$results"
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

python3 - "$threads" "$reps" "$pp" "$out" "$membw" "$results" "$load_before" "$load_after" <<'PY'
import datetime, json, os, sys
threads, reps, pp, out, membw, results, load_before, load_after = sys.argv[1:9]
threads, pp = int(threads), int(pp)
membw = json.loads(membw)
runs = [json.loads(l) for l in open(results)]
triad = {r["threads"]: r["triad_gbs"] for r in membw["results"]}
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
# Parameters a decode step reads: embedding row (negligible), attention, router, 2 of 8 experts, head.
H, KV, F, L, V, E, K = 1024, 256, 3584, 11, 32000, 8, 2
attn = H * H * 2 + KV * H * 2
active = L * (attn + E * H + K * 3 * H * F) + V * H
bits = {"q4_0": 4.5, "q8_0": 8.5}

def llama_tps(llama, n_prompt, n_gen):
    for r in llama:
        if r["n_prompt"] == n_prompt and r["n_gen"] == n_gen:
            return r["avg_ts"], r["stddev_ts"]
    raise SystemExit(f"llama-bench result pp{n_prompt}/tg{n_gen} missing")

text = [
    f"### Mixture of experts: Kestrel vs llama.cpp, {threads} threads ({datetime.date.today()})",
    "",
    f"Machine: {cpu}, {os.cpu_count()} cores; load average (1/5/15 min) {load_before} before, "
    f"{load_after} after; Kestrel kernels: {runs[0]['kestrel']['isa']}; llama.cpp build "
    f"{runs[0]['llama'][0].get('build_commit', '?')}.",
    "Memory bandwidth (`kestrel membw`, STREAM triad): "
    + ", ".join(f"{r['triad_gbs']:.1f} GB/s on {r['threads']} thread(s)" for r in membw["results"]) + ".",
    f"Model: random-weight Mixtral shape (`scripts/make_mixtral_gguf.py`): {L} layers, hidden {H}, "
    f"8 experts of FFN {F}, top-2, vocab {V}; 1.06 B parameters, {active / 1e9:.2f} B read per decode step. "
    f"`llama-bench -p {pp} -n 128 -t {threads} -r {reps}` and `kestrel speed -p {pp} -n 128 -t {threads} -r {reps}`; "
    "tg GB/s = active weight bytes x tokens/s, % of the triad on the same threads.",
    "",
    "| type | test | Kestrel t/s | llama.cpp t/s | ratio | Kestrel GB/s (% triad) | llama.cpp GB/s (% triad) |",
    "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
]
for run in runs:
    k, l, t = run["kestrel"], run["llama"], run["type"]
    lp, lps = llama_tps(l, pp, 0)
    lg, lgs = llama_tps(l, 0, 128)
    kp, kg = k["pp"], k["tg"]
    bpt = active * bits[t] / 8
    gbs = lambda tps: f"{tps * bpt / 1e9:.1f} ({100 * tps * bpt / 1e9 / triad[threads]:.0f}%)"
    text.append(f"| {t.upper()} | pp{pp} | {kp['mean_tps']:.1f} ± {kp['std_tps']:.1f} | {lp:.1f} ± {lps:.1f} | {kp['mean_tps'] / lp:.2f}x | | |")
    text.append(f"| {t.upper()} | tg128 | {kg['mean_tps']:.1f} ± {kg['std_tps']:.1f} | {lg:.1f} ± {lgs:.1f} | {kg['mean_tps'] / lg:.2f}x | {gbs(kg['mean_tps'])} | {gbs(lg)} |")
text.append("")
report = "\n".join(text)
print(report)
existing = open(out).read() if os.path.exists(out) else "# Benchmarks\n"
open(out, "w").write(existing.rstrip() + "\n\n" + report)
PY
