#!/usr/bin/env bash
# First-token objectives under overload: goodput with and without admission control.
#
#   scripts/bench_slo_admission.sh [MODEL.gguf]
#
# 1. Capacity: `kestrel bench` at a fixed concurrency measures the server's request throughput.
# 2. Overload: open-loop Poisson arrivals at OVERLOAD (default 2) times that rate, every request
#    sending `ttft_slo_ms` = SLO_MS, twice on fresh servers: once with the admission check (the
#    default) and once with `--no-slo-admission`. Goodput counts requests whose TTFT met SLO_MS
#    (`--goodput ttft:SLO_MS`); refused requests (429) count as failures, not as goodput.
# Appends a markdown table to a dated file under docs/benchmarks/ and writes the runs' plots to docs/plots/.
#
# Env: THREADS=2, SLO_MS=2000, OVERLOAD=2, NUM_PROMPTS=120, INPUT_LEN=128, OUTPUT_LEN=32,
#      CAPACITY_CONCURRENCY=8, PORT=8411.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --release -q -p kestrel-cli
kestrel=./target/release/kestrel
model=${1:-$($kestrel fetch)}
threads=${THREADS:-2}
slo=${SLO_MS:-2000}
overload=${OVERLOAD:-2}
n=${NUM_PROMPTS:-120}
in_len=${INPUT_LEN:-128}
out_len=${OUTPUT_LEN:-32}
cap_c=${CAPACITY_CONCURRENCY:-8}
port=${PORT:-8411}
results=$(mktemp -d)
mkdir -p docs/plots
# shellcheck source=bench_server_lib.sh
source scripts/bench_server_lib.sh

start_server() { # extra serve flags...
  port=$((port + 1))
  $kestrel serve --model "$model" --port "$port" --threads "$threads" "$@" >"$results/server.log" 2>&1 &
  server_pid=$!
  wait_ready
}

bench() { # name, then bench flags...
  local name=$1
  shift
  $kestrel bench --base-url "http://127.0.0.1:$port" --input-len "$in_len" --output-len "$out_len" \
    --timeout 900 --no-progress --goodput "ttft:$slo" --json-out "$results/$name.json" \
    --plot "docs/plots/slo_admission_$name.svg" "$@" >/dev/null
  curl -sf "http://127.0.0.1:$port/metrics" | grep '^kestrel:requests_slo' >"$results/$name.metrics" || true
}

triad=$($kestrel membw -t "$threads" 2>/dev/null | awk -F'|' 'END { gsub(/ /, "", $3); print $3 " GB/s" }')
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

start_server
bench capacity --concurrency "$cap_c" --num-prompts "$(( cap_c * 4 ))"
stop_server
rate=$(python3 -c "import json,sys; print(round(json.load(open('$results/capacity.json'))['request_throughput'] * $overload, 3))")

start_server
bench admission --request-rate "$rate" --num-prompts "$n" --seed 7 --ttft-slo-ms "$slo"
stop_server
start_server --no-slo-admission
bench no_admission --request-rate "$rate" --num-prompts "$n" --seed 7 --ttft-slo-ms "$slo"
stop_server
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

python3 - "$results" "$model" "$threads" "$in_len" "$out_len" "$slo" "$overload" "$rate" "$triad" "$load_before" "$load_after" "$cap_c" <<'PY'
import json, os, sys, datetime
res, model, threads, in_len, out_len, slo, overload, rate, triad, lb, la, cap_c = sys.argv[1:13]
def load(name):
    r = json.load(open(f"{res}/{name}.json"))
    m = {}
    try:
        for line in open(f"{res}/{name}.metrics"):
            k, v = line.split()
            m[k] = int(float(v))
    except FileNotFoundError:
        pass
    return r, m
cap, _ = load("capacity")
lines = [f"### First-token objectives under {overload}x overload: {os.path.basename(model)}, {threads} threads ({datetime.date.today()})",
         "",
         f"`scripts/bench_slo_admission.sh`: capacity {cap['request_throughput']:.2f} req/s measured at concurrency {cap_c} "
         f"(prompts ~{in_len} tokens, {out_len} output tokens); then Poisson arrivals at {rate} req/s, "
         f"every request with `ttft_slo_ms: {slo}`, on a fresh server each. Goodput: requests per second whose TTFT met {slo} ms "
         f"(refused requests are not goodput). STREAM triad {triad}; load average {lb} before, {la} after.",
         "",
         "| admission check | requests | succeeded | refused (429) | met objective | goodput req/s | TTFT p50 / p99 ms (succeeded) | out tok/s | server met / missed / rejected |",
         "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
for name, label in [("admission", "on (default)"), ("no_admission", "off (`--no-slo-admission`)")]:
    r, m = load(name)
    refused = sum(e["count"] for e in r["errors"] if e["kind"] == "http_429")
    g = r.get("goodput") or {}
    counters = " / ".join(str(m.get(f"kestrel:requests_slo_{k}_total", 0)) for k in ("met", "missed", "rejected"))
    lines.append(f"| {label} | {r['num_prompts']} | {r['successful_requests']} | {refused} | {g.get('good_requests', 0)} | "
                 f"{g.get('request_goodput', 0):.2f} | {r['ttft_ms']['median_ms']:.0f} / {r['ttft_ms']['p99_ms']:.0f} | "
                 f"{r['output_throughput']:.1f} | {counters} |")
lines += ["", "Latency distributions and throughput over time: "
          "[with the check](../plots/slo_admission_admission.svg), "
          "[without it](../plots/slo_admission_no_admission.svg)."]
report = "\n".join(lines) + "\n"
print(report)
out = datetime.date.today().strftime("docs/benchmarks/%Y-%m-%d-slo-admission.md")
existing = open(out).read() if os.path.exists(out) else ""
open(out, "w").write(existing.rstrip() + "\n\n" + report)
PY
