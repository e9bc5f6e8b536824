#!/usr/bin/env bash
# Claude Code and Codex, each completing one non-interactive turn against a local `kestrel serve`,
# configured the way their documentation tells a user to point them at their own server:
#   * Claude Code (`claude -p`): ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY, ANTHROPIC_MODEL and
#     ANTHROPIC_SMALL_FAST_MODEL naming the served model -> POST /v1/messages (streamed).
#   * Codex (`codex exec`): a `model_providers` entry with `wire_api = "responses"` and the key in
#     the provider's `env_key` -> POST /v1/responses (streamed).
# Both send their whole agent prompt (system text and tool schemas) in every request. The server
# serves tests/fixtures/tiny-qwen3-think (a 0.2M-parameter Qwen3 trained to answer any chat with a
# fixed reasoning block and "Hello there!", context 32k), so the prompts fit (about 8.6k and 13.6k
# of its tokens) and the reply ends its turn whatever date and working directory the prompts
# carry. Neither CLI sends a temperature; the server is started greedy with
# `--override-generation-config '{"temperature": 0}'`. The check is the protocol, not the answer:
# each CLI exits 0 and prints the model's text, and the server counted the route.
#
# Usage: tests/agents/run_agent_clis.sh PATH/TO/kestrel
# Installs the CLIs' pinned versions with npm into the Kestrel cache (once); nothing leaves loopback
# at run time (each CLI runs with an empty HOME and its outbound traffic switched off).
set -euo pipefail

KESTREL="$(realpath "${1:?usage: $0 PATH/TO/kestrel}")"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$HERE/../.."
# shellcheck source=../../scripts/lib/server.sh
source "$ROOT/scripts/lib/server.sh"

CLAUDE_CODE_VERSION=2.1.197
CODEX_VERSION=0.171.0
CACHE="${KESTREL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kestrel}"
NODE_DIR="$CACHE/agent-clis/claude-$CLAUDE_CODE_VERSION-codex-$CODEX_VERSION"
CLAUDE="$NODE_DIR/node_modules/.bin/claude"
CODEX="$NODE_DIR/node_modules/.bin/codex"
MODEL_NAME=tiny-agent
KEY=sk-agent-test
TURN_TIMEOUT="${AGENT_TURN_TIMEOUT:-600}"

if [[ ! -x "$CLAUDE" || ! -x "$CODEX" ]]; then
  command -v npm >/dev/null || { echo "FAIL: npm is needed to install Claude Code and Codex" >&2; exit 1; }
  echo "installing Claude Code $CLAUDE_CODE_VERSION and Codex $CODEX_VERSION with npm"
  mkdir -p "$NODE_DIR"
  npm install --prefix "$NODE_DIR" --no-save --no-package-lock --no-audit --no-fund --loglevel=error \
    "@anthropic-ai/claude-code@$CLAUDE_CODE_VERSION" "@openai/codex@$CODEX_VERSION" >/dev/null
fi

MODEL="$ROOT/tests/fixtures/tiny-qwen3-think"
PORT="$(free_port)"
BASE="http://127.0.0.1:$PORT"
WORK="$(mktemp -d)"
LOG="$WORK/server.log"
cleanup() {
  server_stop_all
  rm -rf "$WORK"
}
trap cleanup EXIT

server_start "$LOG" "$KESTREL" serve --model "$MODEL" --served-model-name "$MODEL_NAME" \
  --hostname 127.0.0.1 --port "$PORT" --api-key "$KEY" --kv-cache-memory 1GiB \
  --override-generation-config '{"temperature": 0}'
server_wait_ready "$SERVER_PID" "$PORT" "$LOG"

PROMPT="Say hi."

fail() {
  echo "FAIL: $*" >&2
  echo "--- server log (tail) ---" >&2
  tail -n 40 "$LOG" >&2
  exit 1
}

# A one-turn run of a CLI in an empty home and working directory: `run_cli NAME OUT CMD...`.
run_cli() {
  local name="$1" out="$2"
  shift 2
  local home="$WORK/$name-home"
  mkdir -p "$home/work"
  echo "== $name"
  if ! (cd "$home/work" && env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$home" TERM=dumb \
    "$@" </dev/null >"$out" 2>"$out.err"); then
    cat "$out" "$out.err" >&2
    fail "$name exited non-zero"
  fi
  if ! grep -q '[[:alpha:]]' "$out"; then
    cat "$out.err" >&2
    fail "$name printed no text"
  fi
  echo "$name said: $(head -c 300 "$out")"
}

run_cli claude "$WORK/claude.out" \
  ANTHROPIC_BASE_URL="$BASE" ANTHROPIC_API_KEY="$KEY" \
  ANTHROPIC_MODEL="$MODEL_NAME" ANTHROPIC_SMALL_FAST_MODEL="$MODEL_NAME" \
  ANTHROPIC_DEFAULT_HAIKU_MODEL="$MODEL_NAME" ANTHROPIC_DEFAULT_SONNET_MODEL="$MODEL_NAME" \
  ANTHROPIC_DEFAULT_OPUS_MODEL="$MODEL_NAME" CLAUDE_CODE_SUBAGENT_MODEL="$MODEL_NAME" \
  CLAUDE_CODE_MAX_OUTPUT_TOKENS=1024 CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 \
  DISABLE_TELEMETRY=1 DISABLE_ERROR_REPORTING=1 DISABLE_AUTOUPDATER=1 \
  timeout "$TURN_TIMEOUT" "$CLAUDE" -p "$PROMPT"

CODEX_HOME="$WORK/codex-home/codex"
mkdir -p "$CODEX_HOME"
cat >"$CODEX_HOME/config.toml" <<TOML
model = "$MODEL_NAME"
model_provider = "kestrel"
approval_policy = "never"
sandbox_mode = "read-only"
check_for_update_on_startup = false

[features]
plugins = false

[analytics]
enabled = false

[model_providers.kestrel]
name = "Kestrel"
base_url = "$BASE/v1"
wire_api = "responses"
env_key = "KESTREL_API_KEY"
TOML
run_cli codex "$WORK/codex.out" \
  CODEX_HOME="$CODEX_HOME" KESTREL_API_KEY="$KEY" \
  timeout "$TURN_TIMEOUT" "$CODEX" exec --skip-git-repo-check --ephemeral --color never "$PROMPT"

# The turns went through the two APIs (and nothing failed on the server).
METRICS="$(curl -sf "$BASE/metrics")"
for route in /v1/messages /v1/responses; do
  if ! grep -E "^kestrel:http_requests_total\{[^}]*route=\"$route\"[^}]*status=\"200\"" <<<"$METRICS" >/dev/null &&
    ! grep -E "^kestrel:http_requests_total\{[^}]*status=\"200\"[^}]*route=\"$route\"" <<<"$METRICS" >/dev/null; then
    grep '^kestrel:http_requests_total' <<<"$METRICS" >&2 || true
    fail "the server counted no successful $route request"
  fi
done
echo "requests served:"
grep 'kestrel::request' "$LOG" | grep -v 'route="/health"' | sed 's/^.*route=/  route=/' || true
echo "agent CLIs: ok"
