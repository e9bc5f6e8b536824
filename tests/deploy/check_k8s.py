#!/usr/bin/env python3
"""Checks how the manifests in deploy/k8s/ fit together (kubernetes-validate checks each one
against the API schemas; this checks what a schema cannot):

* every Service selects the pods of a workload, on a port that workload's container names;
* workers: a named metrics port equal to --metrics-port, startup/readiness/liveness probes on
  /health of that port, CPU requests equal to --threads, a worker id from the pod name;
* gateway: readiness on /health, liveness that does not depend on workers being live;
* gateway and workers run the same image and point at the Redis Service;
* Redis: a StatefulSet with --appendonly yes, noeviction, and its --dir on a
  volumeClaimTemplate;
* the headless metrics Services publish unready pods and are the DNS names and ports
  deploy/prometheus/kubernetes.yml scrapes, under the job names alerts.yml uses;
* autoscaling: the HPA scales the worker Deployment on external metrics that
  prometheus-adapter-rules.yaml defines, every adapter query is valid PromQL once its template
  is filled (promtool check rules) and uses only series Kestrel exports.

Usage: check_k8s.py (needs PyYAML and promtool)
"""

from __future__ import annotations

import math
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from checklist import Checklist  # noqa: E402
from metric_names import unknown  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
PROM_K8S = ROOT / "deploy" / "prometheus" / "kubernetes.yml"


def flag(args: list[str], name: str) -> str | None:
    for i, word in enumerate(args):
        if word == name and i + 1 < len(args):
            return str(args[i + 1])
    return None


def main() -> int:
    checks = Checklist("k8s")
    check = checks.check

    docs = [d for f in sorted(K8S.glob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d]
    objs = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    workloads = [d for d in docs if d["kind"] in ("Deployment", "StatefulSet")]

    def container(kind: str, name: str) -> dict:
        return objs[(kind, name)]["spec"]["template"]["spec"]["containers"][0]

    for key in [("Deployment", "kestrel-gateway"), ("Deployment", "kestrel-worker"),
                ("StatefulSet", "kestrel-redis"), ("HorizontalPodAutoscaler", "kestrel-worker"),
                ("ConfigMap", "kestrel-adapter-rules")]:
        check(key in objs, f"{key[0]} {key[1]} exists")
    if checks.failed():
        return checks.summary()

    for w in workloads:
        sel = w["spec"]["selector"]["matchLabels"]
        labels = w["spec"]["template"]["metadata"]["labels"]
        check(sel.items() <= labels.items(), f"{w['metadata']['name']} selector matches its pods")

    for svc in [d for d in docs if d["kind"] == "Service"]:
        sel = svc["spec"]["selector"]
        owners = [w for w in workloads
                  if sel.items() <= w["spec"]["template"]["metadata"]["labels"].items()
                  and w["metadata"]["namespace"] == svc["metadata"]["namespace"]]
        names = {p.get("name") for w in owners
                 for c in w["spec"]["template"]["spec"]["containers"] for p in c.get("ports", [])}
        ok = len(owners) == 1 and all(p["targetPort"] in names for p in svc["spec"]["ports"])
        check(ok, f"Service {svc['metadata']['name']} selects one workload, on its named ports")

    worker = container("Deployment", "kestrel-worker")
    wargs = [str(a) for a in worker["args"]]
    check(wargs[:1] == ["worker"], "the worker Deployment runs `kestrel worker`")
    mport = flag(wargs, "--metrics-port")
    check(flag(wargs, "--metrics-host") == "0.0.0.0",
          "the worker's metrics port listens on the pod address (its default is 127.0.0.1)")
    ports = {p["name"]: p["containerPort"] for p in worker.get("ports", [])}
    check(str(ports.get("metrics")) == mport, f"the worker's `metrics` port is --metrics-port {mport}")
    for probe in ["startupProbe", "readinessProbe", "livenessProbe"]:
        get = worker.get(probe, {}).get("httpGet", {})
        check(get.get("path") == "/health" and get.get("port") in ("metrics", ports.get("metrics")),
              f"worker {probe} is GET /health on the metrics port")
    cpu = str(worker["resources"]["requests"]["cpu"])
    check(cpu == flag(wargs, "--threads"), f"worker CPU request {cpu} equals --threads")
    env = {e["name"]: e for e in worker.get("env", [])}
    wid = flag(wargs, "--worker-id") or ""
    var = wid[2:-1] if wid.startswith("$(") else ""
    check(env.get(var, {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.name",
          f"--worker-id {wid} is the pod name")

    gateway = container("Deployment", "kestrel-gateway")
    gargs = [str(a) for a in gateway["args"]]
    check(gargs[:1] == ["gateway"], "the gateway Deployment runs `kestrel gateway`")
    check(flag(gargs, "--hostname") == "0.0.0.0", "the gateway listens on the pod address")
    check(gateway.get("readinessProbe", {}).get("httpGet", {}).get("path") == "/health",
          "gateway readiness is GET /health (503 while no worker is live)")
    check("httpGet" not in gateway.get("livenessProbe", {"httpGet": 1}),
          "gateway liveness does not restart it while no worker is live (not /health)")
    check(gateway["image"] == worker["image"], "gateway and workers run the same image")
    redis_svc = objs.get(("Service", "kestrel-redis"))
    for name, args in [("gateway", gargs), ("worker", wargs)]:
        url = flag(args, "--redis-url") or ""
        check(redis_svc is not None and url.startswith(f"redis://{redis_svc['metadata']['name']}:"),
              f"{name} --redis-url points at the Redis Service ({url})")

    redis_set = objs[("StatefulSet", "kestrel-redis")]
    rc = container("StatefulSet", "kestrel-redis")
    rargs = [str(a) for a in rc.get("args", [])]
    check(flag(rargs, "--appendonly") == "yes", "Redis runs with --appendonly yes")
    check(flag(rargs, "--maxmemory-policy") == "noeviction", "Redis never evicts queued requests")
    claims = {c["metadata"]["name"] for c in redis_set["spec"].get("volumeClaimTemplates", [])}
    rdir = flag(rargs, "--dir")
    on_claim = [m for m in rc.get("volumeMounts", []) if m["mountPath"] == rdir and m["name"] in claims]
    check(bool(on_claim), f"Redis --dir {rdir} is on a volumeClaimTemplate")

    pcfg = yaml.safe_load(PROM_K8S.read_text())
    jobs = {j["job_name"]: j for j in pcfg["scrape_configs"]}
    for job, svc_name, port in [("kestrel-gateway", "kestrel-gateway-metrics", flag(gargs, "--port")),
                                ("kestrel-worker", "kestrel-worker-metrics", mport)]:
        svc = objs.get(("Service", svc_name), {})
        spec = svc.get("spec", {})
        check(spec.get("clusterIP") == "None" and spec.get("publishNotReadyAddresses") is True,
              f"{svc_name} is headless and publishes unready pods")
        dns = jobs.get(job, {}).get("dns_sd_configs", [{}])[0]
        want = f"{svc_name}.{svc.get('metadata', {}).get('namespace')}.svc"
        check(dns.get("names") == [want] and str(dns.get("port")) == str(port),
              f"{PROM_K8S.name} job {job} scrapes {want}:{port}")

    hpa = objs[("HorizontalPodAutoscaler", "kestrel-worker")]
    ref = hpa["spec"]["scaleTargetRef"]
    check((ref["kind"], ref["name"]) == ("Deployment", "kestrel-worker"),
          "the HPA scales the worker Deployment")
    adapter = yaml.safe_load(objs[("ConfigMap", "kestrel-adapter-rules")]["data"]["config.yaml"])
    rules = adapter.get("externalRules", [])
    served = {r["name"]["as"]: r for r in rules}
    wanted = [m["external"]["metric"]["name"] for m in hpa["spec"]["metrics"] if m["type"] == "External"]
    check(bool(wanted), f"the HPA uses external metrics {wanted}")
    for name in wanted:
        check(name in served, f"prometheus-adapter serves the HPA's metric {name}")

    check(*utilisation_target(hpa))
    behavior = hpa["spec"].get("behavior", {})
    check(behavior.get("scaleUp", {}).get("stabilizationWindowSeconds") == 0,
          "the HPA scales up at once (the 5-minute window is in the utilisation metric, so "
          "queue-depth bursts are not held back)")
    check(behavior.get("scaleDown", {}).get("stabilizationWindowSeconds", 0) >= 300,
          "the HPA scales in slowly (a scale-down stabilisation window of 5 minutes or more)")

    queries = []
    for r in rules:
        series = r["seriesQuery"].split('__name__="', 1)[1].split('"', 1)[0]
        q = r["metricsQuery"].replace("<<.Series>>", series)
        q = q.replace("<<.LabelMatchers>>", 'namespace="kestrel"')
        check("<<" not in q, f"adapter query for {r['name']['as']} has no unknown template field")
        bad = unknown(q) | unknown(series)
        check(not bad, f"adapter rule {r['name']['as']} uses exported series only (unknown: {sorted(bad)})")
        queries.append({"record": f"adapter_{r['name']['as']}", "expr": q})
    with tempfile.NamedTemporaryFile("w", suffix=".yml") as tmp:
        yaml.safe_dump({"groups": [{"name": "adapter", "rules": queries}]}, tmp)
        tmp.flush()
        res = subprocess.run(["promtool", "check", "rules", tmp.name], capture_output=True, text=True)
        check(res.returncode == 0, "every adapter metricsQuery is valid PromQL (promtool check rules)"
              + ("" if res.returncode == 0 else f": {res.stdout}{res.stderr}"))
        check(*sustained_utilisation(tmp.name))

    return checks.summary()


# kube-controller-manager's default --horizontal-pod-autoscaler-tolerance: the HPA changes the
# replica count only when metric / target leaves [1 - 0.1, 1 + 0.1].
HPA_TOLERANCE = 0.1


def hpa_desired(replicas: int, metric: float, target: float) -> int:
    """The replica count the HPA asks for on a `Value` target (its documented algorithm)."""
    ratio = metric / target
    if abs(ratio - 1.0) <= HPA_TOLERANCE:
        return replicas
    return math.ceil(replicas * ratio)


def quantity(q: str) -> float:
    return float(q[:-1]) / 1000 if q.endswith("m") else float(q)


def utilisation_target(hpa: dict) -> tuple[bool, str]:
    """The utilisation target makes the HPA scale out above 80%, not above 80% + tolerance."""
    targets = [m["external"]["target"] for m in hpa["spec"]["metrics"]
               if m["type"] == "External"
               and m["external"]["metric"]["name"] == "kestrel_worker_utilisation"]
    if len(targets) != 1 or targets[0].get("type") != "Value":
        return (False, "the HPA has one Value target on kestrel_worker_utilisation")
    target = quantity(str(targets[0]["value"]))
    holds = hpa_desired(4, 0.795, target) == 4 and hpa_desired(4, 0.805, target) > 4
    return (holds, f"with the HPA's 10% tolerance, a utilisation target of {target} scales 4 "
            f"workers out at 80.5% (to {hpa_desired(4, 0.805, target)}) and not at 79.5%")


# Utilisation 0.9 from minute 2 to minute 13, then 0.5 (two workers of max_num_seqs 16 running
# 14 + 15 sequences, then 8 + 8): the metric the HPA reads stays under the 80% target until the
# high level has lasted 5 minutes (under at 6m, over at 7m), stays above while it lasts, and falls
# under it again as soon as the level drops (13m).
SUSTAINED_TEST = """
rule_files: [{rules}]
evaluation_interval: 30s
tests:
  - interval: 30s
    input_series:
      - series: 'kestrel:num_requests_running{{namespace="kestrel",instance="w1"}}'
        values: '8x3 14x21 8x14'
      - series: 'kestrel:num_requests_running{{namespace="kestrel",instance="w2"}}'
        values: '8x3 15x21 8x14'
      - series: 'kestrel:max_num_seqs{{namespace="kestrel",instance="w1"}}'
        values: '16x40'
      - series: 'kestrel:max_num_seqs{{namespace="kestrel",instance="w2"}}'
        values: '16x40'
    promql_expr_test:
      - expr: adapter_kestrel_worker_utilisation < 0.8
        eval_time: 6m
        exp_samples: [{{labels: 'adapter_kestrel_worker_utilisation', value: 0.5}}]
      - expr: adapter_kestrel_worker_utilisation > 0.8
        eval_time: 7m
        exp_samples: [{{labels: 'adapter_kestrel_worker_utilisation', value: 0.90625}}]
      - expr: adapter_kestrel_worker_utilisation > 0.8
        eval_time: 12m30s
        exp_samples: [{{labels: 'adapter_kestrel_worker_utilisation', value: 0.90625}}]
      - expr: adapter_kestrel_worker_utilisation < 0.8
        eval_time: 13m
        exp_samples: [{{labels: 'adapter_kestrel_worker_utilisation', value: 0.5}}]
"""


def sustained_utilisation(rules_file: str) -> tuple[bool, str]:
    """The utilisation the HPA reads crosses 80% only after 5 minutes above it (promtool)."""
    with tempfile.NamedTemporaryFile("w", suffix=".test.yml") as test:
        test.write(SUSTAINED_TEST.format(rules=rules_file))
        test.flush()
        res = subprocess.run(["promtool", "test", "rules", test.name], capture_output=True, text=True)
    return (res.returncode == 0, "the HPA's utilisation crosses 80% after 5 minutes above it, and leaves at once"
            + ("" if res.returncode == 0 else f": {res.stdout}{res.stderr}"))


if __name__ == "__main__":
    sys.exit(main())
