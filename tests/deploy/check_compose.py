#!/usr/bin/env python3
"""Checks the compose stack as a compose implementation resolved it, and the files it mounts.

Input: the output of `docker-compose -f deploy/docker-compose.yml config` (a file path), which
has already passed that implementation's schema validation. Checked here:

* Redis runs with the append-only file on and never evicts, its /data on a named volume;
* one gateway and at least two workers from the same image, both pointed at that Redis;
* every worker's HEALTHCHECK port (KESTREL_HEALTH_PORT) is its --metrics-port, and the gateway's
  is its --port;
* deploy/prometheus/prometheus.yml scrapes the gateway (job kestrel-gateway) on its --port and
  every worker replica (job kestrel-worker, DNS of the worker service) on --metrics-port, and
  loads alerts.yml; the compose file mounts that folder where --config.file expects it;
* Grafana gets the provisioning folder and the dashboard where the dashboard provider reads,
  and the provisioned datasource (its uid is the one every dashboard panel uses) points at the
  prometheus service.

Usage: check_compose.py RESOLVED.yml (needs PyYAML)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from checklist import Checklist  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


def flag(command: list[str], name: str) -> str | None:
    for i, word in enumerate(command):
        if word == name and i + 1 < len(command):
            return str(command[i + 1])
        if word.startswith(name + "="):
            return word.split("=", 1)[1]
    return None


def mounts(service: dict) -> dict[str, str]:
    """container path -> host path of the bind mounts and volumes."""
    out = {}
    for v in service.get("volumes", []):
        if isinstance(v, str):
            parts = v.split(":")
            out[parts[1]] = parts[0]
        else:
            out[v["target"]] = v.get("source", "")
    return out


def main() -> int:
    resolved = yaml.safe_load(Path(sys.argv[1]).read_text())
    checks = Checklist("compose")
    check = checks.check

    services = resolved.get("services", {})
    for name in ["redis", "gateway", "worker", "prometheus", "grafana"]:
        check(name in services, f"service {name} exists")
    if checks.failed():
        return checks.summary()
    redis, gateway, worker = services["redis"], services["gateway"], services["worker"]
    prom, grafana = services["prometheus"], services["grafana"]

    rcmd = [str(w) for w in redis.get("command", [])]
    check(flag(rcmd, "--appendonly") == "yes", "redis runs with --appendonly yes")
    check(flag(rcmd, "--maxmemory-policy") in (None, "noeviction"),
          "redis does not evict keys (queued requests)")
    check(mounts(redis).get("/data") in resolved.get("volumes", {}),
          "redis keeps /data on a named volume")

    gcmd = [str(w) for w in gateway.get("command", [])]
    wcmd = [str(w) for w in worker.get("command", [])]
    check(gcmd[:1] == ["gateway"], f"the gateway service runs `kestrel gateway` ({gcmd[:1]})")
    check(wcmd[:1] == ["worker"], f"the worker service runs `kestrel worker` ({wcmd[:1]})")
    check(gateway.get("image") == worker.get("image") and gateway.get("image"),
          "gateway and workers run the same image")
    for name, cmd in [("gateway", gcmd), ("worker", wcmd)]:
        url = flag(cmd, "--redis-url") or ""
        check(url.startswith("redis://redis:"), f"{name} --redis-url points at the redis service ({url})")
        check("redis" in services[name].get("depends_on", {}), f"{name} depends on redis")
    replicas = worker.get("deploy", {}).get("replicas", worker.get("scale", 1))
    check(replicas >= 2, f"at least two workers (replicas {replicas})")
    gport = flag(gcmd, "--port")
    mport = flag(wcmd, "--metrics-port")
    check(flag(gcmd, "--hostname") == "0.0.0.0", "the gateway listens on 0.0.0.0 in its container")
    check(flag(wcmd, "--metrics-host") == "0.0.0.0",
          "the workers' metrics port listens on 0.0.0.0 (its default is 127.0.0.1)")
    check(str(gateway.get("environment", {}).get("KESTREL_HEALTH_PORT", "8000")) == gport,
          f"the gateway's health check probes its --port {gport}")
    check(str(worker.get("environment", {}).get("KESTREL_HEALTH_PORT")) == mport,
          f"the workers' health check probes their --metrics-port {mport}")

    pcmd = [str(w) for w in prom.get("command", [])]
    config_file = flag(pcmd, "--config.file") or "/etc/prometheus/prometheus.yml"
    config_dir = str(Path(config_file).parent)
    host_dir = mounts(prom).get(config_dir, "")
    check(Path(host_dir).resolve() == (DEPLOY / "prometheus").resolve(),
          f"prometheus gets deploy/prometheus at {config_dir}")
    pcfg = yaml.safe_load((DEPLOY / "prometheus" / Path(config_file).name).read_text())
    check("alerts.yml" in pcfg.get("rule_files", []), "prometheus.yml loads alerts.yml")
    jobs = {j["job_name"]: j for j in pcfg.get("scrape_configs", [])}
    gjob = jobs.get("kestrel-gateway", {})
    gtargets = [t for s in gjob.get("static_configs", []) for t in s.get("targets", [])]
    check(gtargets == [f"gateway:{gport}"], f"job kestrel-gateway scrapes gateway:{gport} ({gtargets})")
    wjob = jobs.get("kestrel-worker", {})
    dns = wjob.get("dns_sd_configs", [{}])[0]
    check(dns.get("names") == ["worker"] and str(dns.get("port")) == mport,
          f"job kestrel-worker finds every worker replica by DNS on port {mport}")

    gm = mounts(grafana)
    prov = gm.get("/etc/grafana/provisioning", "")
    check(Path(prov).resolve() == (DEPLOY / "grafana" / "provisioning").resolve(),
          "grafana gets deploy/grafana/provisioning")
    providers = yaml.safe_load(
        (DEPLOY / "grafana" / "provisioning" / "dashboards" / "kestrel.yml").read_text())["providers"]
    path = providers[0]["options"]["path"]
    dash_host = gm.get(f"{path}/kestrel.json", "")
    check(Path(dash_host).resolve() == (DEPLOY / "grafana" / "kestrel.json").resolve(),
          f"grafana gets kestrel.json in the provider's folder {path}")
    sources = yaml.safe_load(
        (DEPLOY / "grafana" / "provisioning" / "datasources" / "prometheus.yml").read_text())["datasources"]
    uid = sources[0].get("uid")
    check(sources[0].get("url") == "http://prometheus:9090",
          "the datasource points at the prometheus service")
    dash = json.loads((DEPLOY / "grafana" / "kestrel.json").read_text())
    uids = {p.get("datasource", {}).get("uid") for p in dash["panels"] if p.get("type") != "row"}
    uids |= {t.get("datasource", {}).get("uid") for p in dash["panels"] for t in p.get("targets", [])}
    check(uids == {uid}, f"every panel and query uses the provisioned datasource uid {uid} ({uids})")

    return checks.summary()


if __name__ == "__main__":
    sys.exit(main())
