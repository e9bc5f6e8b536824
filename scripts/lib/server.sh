# Sourced by the scripts that run `kestrel serve` (or a worker, gateway, redis-server) in the
# background for a test: pick a free loopback port, start a process with its output in a log,
# wait for its /health, and stop everything that was started. Uses $PYTHON (default python3).
#
#   port="$(free_port)"
#   server_start "$log" "$KESTREL" serve --hostname 127.0.0.1 --port "$port"   # sets SERVER_PID
#   server_wait_ready "$SERVER_PID" "$port" "$log" || exit 1
#   trap server_stop_all EXIT   # or call it from the script's own cleanup
#
# SERVER_READY_TIMEOUT (seconds, default 120) bounds the wait; SERVER_LOG_TAIL (default 40) is
# how many lines of a log a failure prints.

SERVER_PID=
SERVER_PIDS=()

# Prints a TCP port that was free on 127.0.0.1 a moment ago.
free_port() {
  "${PYTHON:-python3}" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# server_start LOG COMMAND [ARGS...]: runs the command in the background with stdout and stderr
# in LOG; its pid goes to SERVER_PID and onto SERVER_PIDS (for server_stop_all).
server_start() {
  local log="$1"
  shift
  "$@" >"$log" 2>&1 &
  SERVER_PID=$!
  SERVER_PIDS+=("$SERVER_PID")
}

# server_log_tail LOG [LINES]: the last lines of a log on stderr.
server_log_tail() {
  echo "--- $1 (last ${2:-${SERVER_LOG_TAIL:-40}} lines) ---" >&2
  tail -n "${2:-${SERVER_LOG_TAIL:-40}}" "$1" >&2
}

# Succeeds when http://127.0.0.1:PORT/health answers 200.
server_healthy() {
  "${PYTHON:-python3}" -c "import urllib.request, sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:$1/health', timeout=2).status == 200 else 1)" 2>/dev/null
}

# server_wait_ready PID PORT LOG: waits until PORT's /health answers 200. Fails (status 1, with
# the log's tail on stderr) if the process exits first or SERVER_READY_TIMEOUT seconds pass.
server_wait_ready() {
  local pid="$1" port="$2" log="$3"
  local tries=$((${SERVER_READY_TIMEOUT:-120} * 2))
  for _ in $(seq 1 "$tries"); do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "the process behind port $port (pid $pid) exited before it was ready" >&2
      server_log_tail "$log"
      return 1
    fi
    if server_healthy "$port"; then
      return 0
    fi
    sleep 0.5
  done
  echo "the server on port $port (pid $pid) was not ready after ${SERVER_READY_TIMEOUT:-120} s" >&2
  server_log_tail "$log"
  return 1
}

# server_stop PID: stops one process started by server_start and reaps it.
server_stop() {
  kill "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}

# Stops every process started by server_start (all are signalled before any is waited for).
server_stop_all() {
  local pid
  for pid in "${SERVER_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${SERVER_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  SERVER_PIDS=()
}
