#!/usr/bin/env bash
# Tests of the production stack in deploy/ (see docs/deployment.md):
#
#   promtool check config / check rules / test rules   Prometheus configs and alerts.yml
#   tests/deploy/check_alerts.py                        every alert tested firing and not firing
#   docker-compose config                               deploy/docker-compose.yml
#   tests/deploy/check_compose.py                       how the compose services fit together
#   kubernetes-validate --strict                        deploy/k8s/*.yaml against API schemas
#   tests/deploy/check_k8s.py                           how the manifests fit together
#   tests/deploy/check_dockerfile.py                    deploy/Dockerfile's required properties
#   tests/deploy/check_grafana.py                       dashboard structure and required panels
#   tests/deploy/test_dashboard.py                      every panel query against a real
#                                                       Prometheus scraping a real kestrel serve
#                                                       (and gateway + worker when available)
#
# Usage: scripts/test_deploy.sh PATH/TO/kestrel
# Uses the default model (KESTREL_DEFAULT_MODEL if set, else `kestrel serve`'s default).
#
# Installs what is missing: Debian's `prometheus` package (prometheus and promtool) and
# `docker-compose` package (Compose 1.29, the compose implementation Debian 12 ships; its
# `config` command validates a file against the Compose specification schema without a Docker
# engine), `redis-server` when the binary has the fleet's gateway and worker, and a virtual
# environment with kubernetes-validate (API schemas included, no network at run time) and
# PyYAML under target/deploy-venv. Binds 127.0.0.1 ports only.
set -uo pipefail

KESTREL="${1:?usage: $0 PATH/TO/kestrel}"
KESTREL="$(cd "$(dirname "$KESTREL")" && pwd)/$(basename "$KESTREL")"
cd "$(dirname "$0")/.."
VENV="${KESTREL_DEPLOY_VENV:-target/deploy-venv}"
KUBERNETES_VALIDATE_VERSION=1.37.0
# Oldest and newest Kubernetes releases the manifests are validated against.
KUBERNETES_VERSIONS=(1.27.0 1.37.0)

apt_install() {
  local sudo=()
  if [[ $(id -u) -ne 0 ]]; then
    if sudo -n true 2>/dev/null; then
      sudo=(sudo -n)
    else
      echo "test_deploy: missing Debian packages $*; install them (apt-get install $*) or run as root" >&2
      return 1
    fi
  fi
  echo "test_deploy: installing $* with apt-get"
  local apt=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -y -q --no-install-recommends)
  "${apt[@]}" install "$@" >/dev/null \
    || { "${sudo[@]}" apt-get update -q >/dev/null && "${apt[@]}" install "$@" >/dev/null; }
}

ensure_tools() {
  if ! command -v promtool >/dev/null || ! command -v prometheus >/dev/null; then
    apt_install prometheus || return 1
    # The package enables a system service; on a machine running systemd, stop it again: the
    # tests run their own Prometheus on a free port.
    if [[ -d /run/systemd/system ]] && command -v systemctl >/dev/null; then
      systemctl disable --now prometheus.service >/dev/null 2>&1 || true
    fi
  fi
  if ! command -v docker-compose >/dev/null; then
    apt_install docker-compose || return 1
  fi
  # The dashboard test runs a gateway and a worker too when the binary has them; they need Redis.
  if "$KESTREL" gateway --help >/dev/null 2>&1 && ! command -v redis-server >/dev/null; then
    apt_install redis-server || return 1
    if [[ -d /run/systemd/system ]] && command -v systemctl >/dev/null; then
      systemctl disable --now redis-server.service >/dev/null 2>&1 || true
    fi
  fi
  if [[ ! -x "$VENV/bin/kubernetes-validate" ]] \
    || ! "$VENV/bin/python" -c 'import yaml' 2>/dev/null \
    || [[ "$("$VENV/bin/kubernetes-validate" --version 2>/dev/null)" != "$KUBERNETES_VALIDATE_VERSION" ]]; then
    rm -rf "$VENV"
    if ! python3 -m venv "$VENV" 2>/dev/null; then
      rm -rf "$VENV"
      apt_install python3-venv || return 1
      python3 -m venv "$VENV" || return 1
    fi
    "$VENV/bin/pip" install --quiet --disable-pip-version-check \
      "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION" pyyaml || return 1
  fi
}

if ! ensure_tools; then
  echo "test_deploy: cannot install the tools the deployment tests need" >&2
  echo "deploy: 0 passed, 1 failed"
  exit 1
fi

PY="$VENV/bin/python"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
passed=0
failed=0
failed_steps=()

step() {
  local name="$1"
  shift
  echo "=== $name"
  if "$@"; then
    passed=$((passed + 1))
    echo "--- ok: $name"
  else
    failed=$((failed + 1))
    failed_steps+=("$name")
    echo "--- FAILED: $name"
  fi
}

compose_config() {
  docker-compose -f deploy/docker-compose.yml config >"$TMP/compose.yml"
}

kubernetes_validate() {
  local v rc=0
  for v in "${KUBERNETES_VERSIONS[@]}"; do
    "$VENV/bin/kubernetes-validate" --strict -k "$v" deploy/k8s/*.yaml || rc=1
  done
  return $rc
}

step "promtool check config deploy/prometheus/prometheus.yml" promtool check config deploy/prometheus/prometheus.yml
step "promtool check config deploy/prometheus/kubernetes.yml" promtool check config deploy/prometheus/kubernetes.yml
step "promtool check rules deploy/prometheus/alerts.yml" promtool check rules deploy/prometheus/alerts.yml
step "promtool test rules deploy/prometheus/alerts.test.yml" promtool test rules deploy/prometheus/alerts.test.yml
step "alerts: test coverage, labels, runbooks" "$PY" tests/deploy/check_alerts.py
step "docker-compose config (Compose $(docker-compose version --short 2>/dev/null))" compose_config
step "compose stack wiring" "$PY" tests/deploy/check_compose.py "$TMP/compose.yml"
step "kubernetes-validate --strict deploy/k8s (Kubernetes ${KUBERNETES_VERSIONS[*]})" kubernetes_validate
step "kubernetes manifests wiring" "$PY" tests/deploy/check_k8s.py
step "Dockerfile properties" "$PY" tests/deploy/check_dockerfile.py
step "Grafana dashboard structure" "$PY" tests/deploy/check_grafana.py
step "dashboard queries against a real Prometheus scraping real Kestrel processes" \
  "$PY" tests/deploy/test_dashboard.py --kestrel "$KESTREL"

if ((failed > 0)); then
  printf 'failed: %s\n' "${failed_steps[@]}"
fi
echo "deploy: $passed passed, $failed failed"
((failed == 0))
