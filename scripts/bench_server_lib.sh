# Shared by the serving benchmarks (sourced): one background server at a time, on top of
# scripts/lib/server.sh. Callers set `port` and `results`, start the server with its pid in
# `server_pid` (its log in `$server_log`, default `$results/server.log`), then call
# `wait_ready`; `stop_server` (also run on exit) stops it.
# shellcheck source=lib/server.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/server.sh"

server_pid=

stop_server() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  server_pid=
}
trap stop_server EXIT

# Waits up to 240 s for the server's /health; on failure prints its log's tail and fails.
wait_ready() {
  SERVER_READY_TIMEOUT=240 server_wait_ready "$server_pid" "$port" "${server_log:-$results/server.log}"
}
