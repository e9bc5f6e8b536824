#!/usr/bin/env bash
# The long run of the fleet's fault tests: repeats the suite's short versions (a worker killed
# mid-stream, 200 cancelled streams, Redis and gateway restarts, 503/429 admission) ROUNDS times
# against real redis-server, gateway and worker processes, and stops at the first failure.
#
#   scripts/fleet_faults.sh            # ROUNDS=20
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${ROUNDS:-20}
cargo build --release --locked -p kestrel-cli
KESTREL_DEFAULT_MODEL="$(./target/release/kestrel fetch)"
export KESTREL_DEFAULT_MODEL
for r in $(seq 1 "$rounds"); do
  echo "round $r of $rounds"
  cargo nextest run --release --locked -p kestrel-cli --test it --no-fail-fast -E "test(/^fleet::/)"
done
echo "all $rounds rounds passed"
