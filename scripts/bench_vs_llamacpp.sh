#!/usr/bin/env bash
# Side-by-side speed of Kestrel and llama.cpp on the same GGUF files, same machine, same threads,
# measured in one run, plus the machine's memory bandwidth (STREAM triad). Appends a dated
# markdown section to OUT.md (default docs/benchmarks.md).
#
#   scripts/bench_vs_llamacpp.sh LLAMA_CPP_BIN_DIR [OUT.md]
#
# One run measures, in order:
#   1. `kestrel membw`: triad GB/s on 1 and $THREADS threads;
#   2. the default model (SmolLM2-135M-Instruct Q4_1): pp512 / tg128;
#   3. the default model re-quantized to Q8_0 by `kestrel quantize`: pp512 / tg128;
#   4. random-weight TinyLlama-1.1B-shape GGUFs (scripts/make_tinyllama_gguf.py) in Q4_0 and
#      Q8_0: pp$TINY_PP / tg128 (pp on a 1B model with 2 cores is slow, hence -p 128).
# For each tg it reports the weight bytes a decode step reads times tokens/s and that rate as a
# percentage of the triad. Generated files go to $WORK_DIR (default /tmp/kestrel-bench) and are
# never committed. LLAMA_CPP_BIN_DIR holds a llama.cpp build's `llama-bench`.
set -euo pipefail
cd "$(dirname "$0")/.."

bin_dir=${1:?usage: $0 LLAMA_CPP_BIN_DIR [OUT.md]}
out=${2:-docs/benchmarks.md}
threads=${THREADS:-2}
reps=${REPS:-5}
tiny_pp=${TINY_PP:-128}
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

membw=$($kestrel membw -t "1,$threads" --json)
results="$work/results.jsonl"
: >"$results"
bench() { # MODEL PROMPT_TOKENS
    local l k
    l=$("$bin_dir/llama-bench" -m "$1" -p "$2" -n 128 -t "$threads" -r "$reps" -o json 2>/dev/null)
    k=$($kestrel speed --model "$1" -p "$2" -n 128 -t "$threads" -r "$reps" --json)
    python3 -c 'import json,sys; print(json.dumps({"pp": int(sys.argv[1]), "llama": json.loads(sys.argv[2]), "kestrel": json.loads(sys.argv[3])}))' \
        "$2" "$l" "$k" >>"$results"
}
bench "$smol" 512
bench "$smol_q8" 512
bench "$work/tinyllama-shape-random.Q4_0.gguf" "$tiny_pp"
bench "$work/tinyllama-shape-random.Q8_0.gguf" "$tiny_pp"

python3 - "$threads" "$reps" "$out" "$membw" "$results" <<'PY'
import datetime, json, os, sys
threads, reps, out, membw, results = sys.argv[1:6]
threads = int(threads)
membw = json.loads(membw)
runs = [json.loads(l) for l in open(results)]
triad = {r["threads"]: r["triad_gbs"] for r in membw["results"]}
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
flags = open("/proc/cpuinfo").read()
isa = [f for f in ("avx2", "avx512f", "avx512_vnni") if f" {f} " in flags]

def llama_tps(llama, n_prompt, n_gen):
    for r in llama:
        if r["n_prompt"] == n_prompt and r["n_gen"] == n_gen:
            return r["avg_ts"], r["stddev_ts"]
    raise SystemExit(f"llama-bench result pp{n_prompt}/tg{n_gen} missing")

text = [
    f"### Kestrel vs llama.cpp, {threads} threads, with memory bandwidth ({datetime.date.today()})",
    "",
    f"Machine: {cpu}, {os.cpu_count()} cores, ISA flags {', '.join(isa)}; "
    f"Kestrel kernels: {runs[0]['kestrel']['isa']}; llama.cpp build {runs[0]['llama'][0].get('build_commit', '?')}.",
    f"Memory bandwidth (`kestrel membw`, STREAM triad over 3 x {membw['array_mib']} MiB f64, best of "
    f"{membw['reps']}): " + ", ".join(f"{r['triad_gbs']:.1f} GB/s on {r['threads']} thread(s)" for r in membw["results"]) + ".",
    f"Each test: `llama-bench -p P -n 128 -t {threads} -r {reps}` and `kestrel speed -p P -n 128 -t {threads} -r {reps}`. "
    "tg GB/s = weight bytes read per decode step x tokens/s; % = of the triad on the same threads.",
    "",
    "| model | test | Kestrel t/s | llama.cpp t/s | ratio | Kestrel GB/s (% triad) | llama.cpp GB/s (% triad) |",
    "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
]
for run in runs:
    k, l, p = run["kestrel"], run["llama"], run["pp"]
    lp, lps = llama_tps(l, p, 0)
    lg, lgs = llama_tps(l, 0, 128)
    kp, kg = k["pp"], k["tg"]
    text.append(f"| {k['model']} | pp{p} | {kp['mean_tps']:.1f} ± {kp['std_tps']:.1f} | {lp:.1f} ± {lps:.1f} | {kp['mean_tps'] / lp:.2f}x | | |")
    bpt = kg["bytes_per_token"]
    gbs = lambda tps: f"{tps * bpt / 1e9:.1f} ({100 * tps * bpt / 1e9 / triad[threads]:.0f}%)"
    text.append(f"| {k['model']} | tg128 | {kg['mean_tps']:.1f} ± {kg['std_tps']:.1f} | {lg:.1f} ± {lgs:.1f} | {kg['mean_tps'] / lg:.2f}x | {gbs(kg['mean_tps'])} | {gbs(lg)} |")
text.append("")
report = "\n".join(text)
print(report)
header = "# Benchmarks\n\nMeasured with `scripts/bench_vs_llamacpp.sh`; every table is one run of both programs.\n\n"
existing = open(out).read() if os.path.exists(out) else header
if not existing.startswith("# Benchmarks"):
    existing = header + existing
open(out, "w").write(existing.rstrip() + "\n\n" + report)
PY
