#!/usr/bin/env bash
# Side-by-side speed of Kestrel and llama.cpp on the same GGUF file, same machine, same threads,
# measured in one run. Writes a markdown report (default docs/benchmarks.md).
#
#   scripts/bench_vs_llamacpp.sh LLAMA_CPP_BIN_DIR [MODEL.gguf] [OUT.md]
#
# LLAMA_CPP_BIN_DIR holds a llama.cpp build's `llama-bench` (built from source beside this
# project; nothing of it is committed). MODEL defaults to Kestrel's default model.
set -euo pipefail
cd "$(dirname "$0")/.."

bin_dir=${1:?usage: $0 LLAMA_CPP_BIN_DIR [MODEL.gguf] [OUT.md]}
cargo build --release -q -p kestrel-cli
kestrel=./target/release/kestrel
model=${2:-$($kestrel fetch)}
out=${3:-docs/benchmarks.md}
threads=${THREADS:-2}
reps=${REPS:-5}

llama_json=$("$bin_dir/llama-bench" -m "$model" -p 512 -n 128 -t "$threads" -r "$reps" -o json 2>/dev/null)
kestrel_json=$($kestrel speed --model "$model" -p 512 -n 128 -t "$threads" -r "$reps" --json)

python3 - "$model" "$threads" "$out" "$llama_json" "$kestrel_json" <<'PY'
import json, os, platform, subprocess, sys, datetime
model, threads, out, llama, kestrel = sys.argv[1:6]
llama = json.loads(llama)
kestrel = json.loads(kestrel)
def llama_tps(n_prompt, n_gen):
    for r in llama:
        if r["n_prompt"] == n_prompt and r["n_gen"] == n_gen:
            return r["avg_ts"], r["stddev_ts"]
    raise SystemExit("llama-bench result missing")
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
flags = open("/proc/cpuinfo").read()
isa = [f for f in ("avx2", "avx512f", "avx512_vnni") if f" {f} " in flags]
lp, lps = llama_tps(512, 0)
lg, lgs = llama_tps(0, 128)
kp, kps = kestrel["pp"]["mean_tps"], kestrel["pp"]["std_tps"]
kg, kgs = kestrel["tg"]["mean_tps"], kestrel["tg"]["std_tps"]
rows = [
    ("pp512", kp, kps, lp, lps),
    ("tg128", kg, kgs, lg, lgs),
]
text = [
    f"### {os.path.basename(model)}, {threads} threads ({datetime.date.today()})",
    "",
    f"Machine: {cpu}, {os.cpu_count()} cores, ISA flags {', '.join(isa)}; Kestrel kernels: {kestrel['isa']}.",
    f"llama.cpp: `llama-bench -p 512 -n 128 -t {threads}` (build {llama[0].get('build_commit', '?')}).",
    "",
    "| test | Kestrel t/s | llama.cpp t/s | ratio |",
    "| --- | ---: | ---: | ---: |",
]
for name, k, ks, l, ls in rows:
    text.append(f"| {name} | {k:.1f} ± {ks:.1f} | {l:.1f} ± {ls:.1f} | {k / l:.2f}x |")
text.append("")
report = "\n".join(text)
print(report)
header = "# Benchmarks\n\nMeasured with `scripts/bench_vs_llamacpp.sh`; every table is one run of both programs.\n\n"
existing = open(out).read() if os.path.exists(out) else header
if not existing.startswith("# Benchmarks"):
    existing = header + existing
open(out, "w").write(existing.rstrip() + "\n\n" + report)
PY
