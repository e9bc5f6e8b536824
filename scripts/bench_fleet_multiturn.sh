#!/usr/bin/env bash
# Multi-turn conversations against a fleet: redis-server, 2 `kestrel worker`s of one model and a
# `kestrel gateway`, measured with `kestrel bench --multi-turn` (CONVERSATIONS x TURNS, each turn
# resending the growing history) once per gateway routing mode: `--routing shared` and
# `--routing cache-aware`. Every pass starts a fresh fleet (cold prefix caches). Prints a
# markdown table of TTFT p50 and prefix hit rate of turns >= 2, request and output throughput
# per mode, and the shared / cache-aware ratios; the table, each pass's report (text, JSON,
# per-turn plot) and the processes' logs go to the results directory.
#
#   scripts/bench_fleet_multiturn.sh [--kill-worker-at SECONDS] [MODEL.gguf]
#
# --kill-worker-at SECONDS adds a third pass (with the last routing mode) that SIGKILLs one
# worker SECONDS after the bench starts: the other worker re-runs its requests, and the pass
# fails (exit status 1) unless the bench reports zero failed requests.
#
# The model: the argument, else $KESTREL_MODEL, else the default model (`kestrel fetch`); any
# GGUF works. A gateway without the `--routing` flag (older builds) is started without it: both
# passes then run its one routing, and the table says so.
#
# Env: CONVERSATIONS=16, TURNS=6, PREFIX_TOKENS=1500, USER_TOKENS=64, REPLY_TOKENS=32,
# THINK_TIME=0.5, CONCURRENCY (default: all conversations), THREADS=1 (per worker),
# MODES="shared cache-aware", CLAIM_IDLE=5 (seconds before a dead worker's requests are re-run),
# KV_CACHE_MEMORY (passed to the workers when set), WORKER_ARGS (more worker flags, split on
# spaces, e.g. "--chat-template chatml" for a GGUF without a template), RESULTS (default: a new temp dir),
# KESTREL_BIN (default: the release build, built first unless BUILD=0), SEED=0,
# BENCH_TIMEOUT=300 (seconds per request: raise it for large shapes whose first turns queue
# behind each other's prefill).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib/server.sh
source scripts/lib/server.sh

kill_at=
while [ $# -gt 0 ]; do
  case "$1" in
    --kill-worker-at) kill_at="$2"; shift 2 ;;
    --kill-worker-at=*) kill_at="${1#*=}"; shift ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    --*) echo "unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
done

bin=${KESTREL_BIN:-${CARGO_TARGET_DIR:-target}/release/kestrel}
if [ -z "${KESTREL_BIN:-}" ] && [ "${BUILD:-1}" != 0 ]; then
  cargo build --release -q -p kestrel-cli
fi
model=${1:-${KESTREL_MODEL:-$("$bin" fetch)}}
results=${RESULTS:-$(mktemp -d "${TMPDIR:-/tmp}/kestrel-fleet-multiturn.XXXXXX")}
mkdir -p "$results"
read -r -a modes <<<"${MODES:-shared cache-aware}"
threads=${THREADS:-1}

if "$bin" gateway --help | grep -q -- '--routing'; then
  routing_flag=1
else
  routing_flag=0
  echo "note: this gateway has no --routing flag; every pass uses its default routing" >&2
fi

redis_pid=
worker_pids=()
cleanup() {
  server_stop_all 2>/dev/null # (bash reports the SIGKILLed worker as "Killed")
  worker_pids=()
  if [ -n "$redis_pid" ]; then kill "$redis_pid" 2>/dev/null || true; wait "$redis_pid" 2>/dev/null || true; fi
  redis_pid=
}
trap cleanup EXIT

# Waits until N workers publish their heartbeat key in Redis.
wait_workers() { # redis_port count
  for _ in $(seq 1 480); do
    local n
    n=$(redis-cli -p "$1" --scan --pattern 'kestrel:worker:*' | wc -l)
    [ "$n" -ge "$2" ] && return 0
    for pid in "${worker_pids[@]}"; do
      kill -0 "$pid" 2>/dev/null || { echo "a worker exited before it was ready" >&2; return 1; }
    done
    sleep 0.5
  done
  echo "the workers did not register within 240 s" >&2
  return 1
}

# start_fleet NAME MODE: redis, 2 workers, gateway; sets gateway_port.
start_fleet() {
  local name="$1" mode="$2" redis_port
  redis_port=$(free_port)
  redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no \
    >"$results/$name-redis.log" 2>&1 &
  redis_pid=$!
  until redis-cli -p "$redis_port" ping >/dev/null 2>&1; do sleep 0.1; done
  local extra=()
  [ -n "${KV_CACHE_MEMORY:-}" ] && extra+=(--kv-cache-memory "$KV_CACHE_MEMORY")
  local worker_args=()
  read -r -a worker_args <<<"${WORKER_ARGS:-}"
  extra+=("${worker_args[@]}")
  worker_pids=()
  for w in 1 2; do
    server_start "$results/$name-worker$w.log" "$bin" worker \
      --redis-url "redis://127.0.0.1:$redis_port" --model "$model" --threads "$threads" \
      --worker-id "mt-$name-$w" --claim-idle "${CLAIM_IDLE:-5}" "${extra[@]}"
    worker_pids+=("$SERVER_PID")
  done
  wait_workers "$redis_port" 2
  local routing=()
  [ "$routing_flag" = 1 ] && routing=(--routing "$mode")
  gateway_port=$(free_port)
  server_start "$results/$name-gateway.log" "$bin" gateway \
    --redis-url "redis://127.0.0.1:$redis_port" --port "$gateway_port" "${routing[@]}"
  SERVER_READY_TIMEOUT=240 server_wait_ready "$SERVER_PID" "$gateway_port" "$results/$name-gateway.log"
}

# run_bench NAME: the multi-turn bench against the gateway, in the background; sets bench_pid.
run_bench() {
  local conc=()
  [ -n "${CONCURRENCY:-}" ] && conc=(--concurrency "$CONCURRENCY")
  "$bin" bench --multi-turn --base-url "http://127.0.0.1:$gateway_port" \
    --conversations "${CONVERSATIONS:-16}" --turns "${TURNS:-6}" \
    --multi-turn-prefix-tokens "${PREFIX_TOKENS:-1500}" --input-len "${USER_TOKENS:-64}" \
    --output-len "${REPLY_TOKENS:-32}" --think-time "${THINK_TIME:-0.5}" --seed "${SEED:-0}" \
    --timeout "${BENCH_TIMEOUT:-300}" \
    "${conc[@]}" --no-progress --json-out "$results/$1.json" --plot "$results/$1.png" \
    >"$results/$1.txt" 2>"$results/$1.err" &
  bench_pid=$!
}

# pass NAME MODE [KILL_AT]: one fresh fleet, one bench run.
pass() {
  local name="$1" mode="$2" kill_after="${3:-}"
  echo "pass $name (routing $mode)..." >&2
  start_fleet "$name" "$mode"
  run_bench "$name"
  if [ -n "$kill_after" ]; then
    sleep "$kill_after"
    if kill -0 "$bench_pid" 2>/dev/null; then
      kill -9 "${worker_pids[0]}"
      echo "  killed worker 1 (pid ${worker_pids[0]}) after $kill_after s" >&2
      echo "$kill_after" >"$results/$name.killed"
    else
      echo "  the bench ended before $kill_after s: no worker was killed" >&2
    fi
  fi
  local status=0
  wait "$bench_pid" || status=$?
  cleanup
  if [ "$status" != 0 ]; then
    echo "  the bench failed (status $status):" >&2
    cat "$results/$name.err" >&2
    return 1
  fi
}

for mode in "${modes[@]}"; do
  pass "$mode" "$mode"
done
if [ -n "$kill_at" ]; then
  pass kill-worker "${modes[-1]}" "$kill_at" || true
fi

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
python3 - "$results" "$routing_flag" "$model" "$cpu" "$kill_at" "${modes[@]}" <<'PY' | tee "$results/summary.md"
import json, os, sys
d, routing_flag, model, cpu, kill_at, modes = sys.argv[1], sys.argv[2] == "1", sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6:]
def load(name):
    return json.load(open(f"{d}/{name}.json"))
def rate(r):
    return "-" if r is None else f"{100 * r:.1f}%"
reports = {m: load(m) for m in modes}
s = next(iter(reports.values()))["shape"]
print(f"{os.path.basename(model)}, 2 workers x {os.environ.get('THREADS', '1')} thread(s), {cpu}")
print(f"{s['conversations']} conversations x {s['turns']} turns, {s['concurrency']} at once, "
      f"prefix {s['prefix_tokens']} + {s['user_tokens']} tokens per user message, "
      f"{s['max_tokens']}-token replies, think time {s['think_time_s']} s")
if not routing_flag:
    print("\nnote: the gateway has no --routing flag; every pass used its default routing")
print("\n| routing | TTFT p50, turns >= 2 (ms) | hit rate, turns >= 2 | req/s | output tok/s | failed |")
print("|---|---|---|---|---|---|")
for m, r in reports.items():
    print(f"| {m} | {r['ttft_ms_later_turns']['median_ms']:.1f} | {rate(r['prefix_hit_rate_later_turns'])} "
          f"| {r['request_throughput']:.3f} | {r['output_throughput']:.1f} | {r['failed_requests']} |")
if "shared" in reports and "cache-aware" in reports:
    a, b = reports["shared"], reports["cache-aware"]
    def ratio(x, y):
        return "-" if x is None or y in (None, 0) else f"{x / y:.3f}"
    print(f"| shared / cache-aware | {ratio(a['ttft_ms_later_turns']['median_ms'], b['ttft_ms_later_turns']['median_ms'])} "
          f"| {ratio(a['prefix_hit_rate_later_turns'], b['prefix_hit_rate_later_turns'])} "
          f"| {ratio(a['request_throughput'], b['request_throughput'])} "
          f"| {ratio(a['output_throughput'], b['output_throughput'])} | |")
status = 0
if kill_at:
    path = f"{d}/kill-worker.json"
    if not os.path.exists(path):
        print(f"\nworker killed at {kill_at} s: FAILED, the bench wrote no report")
        status = 1
    else:
        r = load("kill-worker")
        killed = os.path.exists(f"{d}/kill-worker.killed")
        lost = r["failed_requests"] + r["skipped_turns"]
        verdict = "no worker was killed (the run ended first)" if not killed else (
            "nothing lost" if lost == 0 else f"LOST {r['failed_requests']} requests, {r['skipped_turns']} turns skipped")
        print(f"\nworker killed at {kill_at} s ({modes[-1]}): {r['successful_requests']} of "
              f"{s['conversations'] * s['turns']} turns succeeded, TTFT p50 turns >= 2 "
              f"{r['ttft_ms_later_turns']['median_ms']:.1f} ms, {verdict}")
        status = 0 if killed and lost == 0 else 1
print(f"\nresults: {d}")
sys.exit(status)
PY
