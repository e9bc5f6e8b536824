#!/usr/bin/env bash
# Coverage-guided fuzzing of Kestrel's parsers (cargo fuzz / libFuzzer, nightly toolchain).
#
#   scripts/fuzz.sh TARGET [SECONDS]   build TARGET, fuzz it for SECONDS (default 3600), then
#                                      minimize its corpus (fuzz/corpus/TARGET)
#   scripts/fuzz.sh all [SECONDS]      every target, one after another, SECONDS each
#   scripts/fuzz.sh list               the targets
#
# Targets: gguf safetensors hf_config tokenizer_json chat_template request (see fuzz/README.md).
# The run starts from fuzz/corpus/TARGET plus the seeds in fuzz/seeds/TARGET (written by
# scripts/fuzz_seeds.py); new inputs go to fuzz/corpus/TARGET. A crash, timeout or
# out-of-memory input is written to fuzz/artifacts/TARGET/ and stops the run: fix the library,
# then copy the input to fuzz/regressions/TARGET/ (the replay tests run it from then on).
# Logs: fuzz/logs/TARGET-<date>.log, with libFuzzer's final stats (execs, execs/s, corpus).
# Runs under `nice -n 19`, one fuzzing process at a time.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
FUZZ="$ROOT/fuzz"
TARGETS=(gguf safetensors hf_config tokenizer_json chat_template request)

# Largest input each target is given, in bytes (its seeds fit).
max_len() {
    case "$1" in
        gguf) echo 65536 ;;
        safetensors) echo 4096 ;;
        hf_config) echo 8192 ;;
        tokenizer_json) echo 32768 ;;
        chat_template) echo 16384 ;;
        request) echo 8192 ;;
        *) echo "unknown target $1" >&2; exit 2 ;;
    esac
}

# The libFuzzer dictionary of each target (fuzz/dicts/).
dict() {
    case "$1" in
        gguf) echo gguf.dict ;;
        chat_template) echo jinja.dict ;;
        *) echo json.dict ;;
    esac
}

ensure_tools() {
    if ! rustup toolchain list | grep -q '^nightly'; then
        rustup toolchain install nightly --profile minimal
    fi
    if ! cargo fuzz --version >/dev/null 2>&1; then
        cargo install cargo-fuzz --locked
    fi
}

run_one() {
    local target="$1" seconds="$2"
    local corpus="$FUZZ/corpus/$target" seeds="$FUZZ/seeds/$target"
    local log="$FUZZ/logs/$target-$(date -u +%Y%m%dT%H%M%SZ).log"
    mkdir -p "$corpus" "$FUZZ/logs" "$FUZZ/artifacts/$target"
    cd "$FUZZ"
    nice -n 19 cargo +nightly fuzz build -s none "$target"
    echo "fuzzing $target for ${seconds}s (log: $log)"
    local start end status=0
    start=$(date +%s)
    # -s none: no sanitizer. The code under test is safe Rust (unsafe is forbidden outside the
    # kernels crate), so a sanitizer would only slow the search down; debug assertions (overflow
    # checks) stay on. timeout: an input taking over 30 s of wall time is a hang (a niced
    # fuzzer can be starved for seconds by other work, so a tighter bound reports false
    # hangs); rss/malloc limits: an input making the parser allocate over 2 GiB (or 1 GiB at
    # once) is a bug.
    nice -n 19 cargo +nightly fuzz run -s none "$target" "$corpus" "$seeds" -- \
        -max_total_time="$seconds" -max_len="$(max_len "$target")" -timeout=30 \
        -dict="$FUZZ/dicts/$(dict "$target")" \
        -rss_limit_mb=2048 -malloc_limit_mb=1024 -print_final_stats=1 \
        >"$log" 2>&1 || status=$?
    end=$(date +%s)
    echo "wall_seconds: $((end - start))" >>"$log"
    grep -E '^stat::|^(==|SUMMARY|Done)|Test unit written|wall_seconds' "$log" | tail -20 || true
    if [ "$status" -ne 0 ]; then
        echo "$target: the fuzzer stopped with status $status; see $log and fuzz/artifacts/$target/" >&2
    fi
    echo "minimizing fuzz/corpus/$target ($(ls "$corpus" | wc -l) files)"
    nice -n 19 cargo +nightly fuzz cmin -s none "$target" "$corpus" -- -max_len="$(max_len "$target")" \
        -timeout=30 -rss_limit_mb=2048 >>"$log" 2>&1
    echo "$target: corpus $(ls "$corpus" | wc -l) files, $(du -sk --apparent-size "$corpus" | cut -f1) KiB"
    return "$status"
}

main() {
    local target="${1:-}" seconds="${2:-3600}"
    case "$target" in
        "" | -h | --help) sed -n '2,16p' "$0"; exit 0 ;;
        list) printf '%s\n' "${TARGETS[@]}"; exit 0 ;;
    esac
    ensure_tools
    if [ "$target" = all ]; then
        local failed=0
        for t in "${TARGETS[@]}"; do
            run_one "$t" "$seconds" || failed=1
        done
        exit "$failed"
    fi
    max_len "$target" >/dev/null
    run_one "$target" "$seconds"
}

main "$@"
