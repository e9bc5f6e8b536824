# Shared by the serving benchmarks (sourced): start/stop one background server and wait for
# its /health. Callers set `port` and `results` and run the server with its pid in `server_pid`.
server_pid=

stop_server() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  server_pid=
}
trap stop_server EXIT

wait_ready() {
  for _ in $(seq 1 480); do
    if curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1; then return 0; fi
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.5
  done
  echo "server (pid $server_pid) did not become ready on port $port; its log:" >&2
  tail -20 "$results/server.log" >&2; return 1
}
