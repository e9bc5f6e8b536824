#!/usr/bin/env bash
# Structured-output cost: output tokens/s of CONC concurrent json_schema requests against CONC
# concurrent free requests (same prompts, same max_tokens, ignore_eos off), on one `kestrel serve`
# of the default model, in one run with alternating rounds. Prints a markdown table row.
#
#   scripts/bench_structured.sh [MODEL.gguf]
#
# Env: CONC=16, ROUNDS=3, MAX_TOKENS=96, THREADS=2, PORT=8341.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p kestrel-cli
kestrel=./target/release/kestrel
model=${1:-$($kestrel fetch)}
conc=${CONC:-16} rounds=${ROUNDS:-3} max_tokens=${MAX_TOKENS:-96} threads=${THREADS:-2}
port=${PORT:-8341}
results=$(mktemp -d)
# shellcheck source=bench_server_lib.sh
source scripts/bench_server_lib.sh

$kestrel serve --model "$model" --port "$port" --threads "$threads" --max-num-seqs 64 >"$results/server.log" 2>&1 &
server_pid=$!
wait_ready

python3 - "$port" "$conc" "$rounds" "$max_tokens" "$model" "$threads" <<'PY'
import json, sys, time, urllib.request
from concurrent.futures import ThreadPoolExecutor

port, conc, rounds, max_tokens, model, threads = sys.argv[1:7]
conc, rounds, max_tokens = int(conc), int(rounds), int(max_tokens)
url = f"http://127.0.0.1:{port}/v1/chat/completions"
schema = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 24},
        "age": {"type": "integer"},
        "city": {"type": "string", "maxLength": 24},
        "hobbies": {"type": "array", "items": {"type": "string", "maxLength": 16}, "maxItems": 3},
        "pet": {"enum": ["cat", "dog", "fish", "none"]},
    },
    "required": ["name", "age", "city", "hobbies", "pet"],
}
subjects = ["a teacher", "a pilot", "a baker", "a painter", "a doctor", "a farmer", "a chef",
            "a sailor", "a poet", "a nurse", "a miner", "a judge", "a gardener", "a tailor",
            "a clown", "a singer"]

def body(i, constrained):
    b = {"messages": [{"role": "user", "content":
            f"Describe {subjects[i % len(subjects)]}: name, age, city, hobbies and pet, as JSON."}],
         "max_tokens": max_tokens, "temperature": 0.7, "seed": i}
    if constrained:
        b["response_format"] = {"type": "json_schema",
                                "json_schema": {"name": "person", "schema": schema}}
    return b

complete = [0]  # constrained outputs that completed (and parsed)

def one(args):
    i, constrained = args
    req = urllib.request.Request(url, data=json.dumps(body(i, constrained)).encode(),
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=900) as r:
        v = json.load(r)
    choice = v["choices"][0]
    if constrained and choice["finish_reason"] == "stop":
        json.loads(choice["message"]["content"])  # a completed constrained output must parse
        complete[0] += 1
    return v["usage"]["completion_tokens"]

def round_tps(constrained):
    t0 = time.perf_counter()
    with ThreadPoolExecutor(conc) as ex:
        tokens = sum(ex.map(one, [(i, constrained) for i in range(conc)]))
    dt = time.perf_counter() - t0
    return tokens, dt

one((0, True)); one((0, False))  # warm-up
complete[0] = 0
totals = {False: [0, 0.0], True: [0, 0.0]}
for _ in range(rounds):
    for constrained in (False, True):
        tokens, dt = round_tps(constrained)
        totals[constrained][0] += tokens
        totals[constrained][1] += dt
free = totals[False][0] / totals[False][1]
cons = totals[True][0] / totals[True][1]
print("| model | threads | concurrency | free tok/s | json_schema tok/s | slowdown | tokens (free / json_schema) | json_schema outputs complete |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
print(f"| {model.rsplit('/', 1)[-1]} | {threads} | {conc} | {free:.1f} | {cons:.1f} | "
      f"{(1 - cons / free) * 100:.1f}% | {totals[False][0]} / {totals[True][0]} | "
      f"{complete[0]} / {conc * rounds} |")
PY
