#!/usr/bin/env python3
"""Checks how the manifests in deploy/k8s/ fit together (kubernetes-validate checks each one
against the API schemas; this checks what a schema cannot):

* every Service selects the pods of workloads of one component, on a port each of their
  containers names;
* workers, one Deployment per served model: a `--served-model-name` equal to the pods'
  `kestrel.dev/model` label (one Deployment per name), a named metrics port equal to
  --metrics-port, startup/readiness/liveness probes on /health of that port, CPU requests equal
  to --threads, a worker id from the pod name, a PodDisruptionBudget of its own;
* gateway: readiness on /health, liveness that does not depend on workers being live;
* gateway and workers run the same image and point at the Redis Service;
* Redis: a StatefulSet with --appendonly yes, noeviction, and its --dir on a
  volumeClaimTemplate;
* the headless metrics Services publish unready pods and are the DNS names and ports
  deploy/prometheus/kubernetes.yml scrapes, under the job names alerts.yml uses;
* autoscaling, per model: each worker Deployment has one HPA, on external metrics that
  prometheus-adapter-rules.yaml defines, each selecting `model_name` = the Deployment's model;
  every adapter query is valid PromQL once its template is filled (promtool check rules), uses
  only series Kestrel exports, and, evaluated by promtool over two models' series, gives the
  selected model's numbers alone.

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

    for key in [("Deployment", "kestrel-gateway"), ("StatefulSet", "kestrel-redis"),
                ("ConfigMap", "kestrel-adapter-rules")]:
        check(key in objs, f"{key[0]} {key[1]} exists")
    workers = [d for d in docs if d["kind"] == "Deployment"
               and d["spec"]["template"]["metadata"]["labels"].get("app.kubernetes.io/component") == "worker"]
    check(len(workers) >= 2, f"a worker Deployment per model ({[w['metadata']['name'] for w in workers]})")
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
        components = {w["spec"]["template"]["metadata"]["labels"].get("app.kubernetes.io/component")
                      for w in owners}
        named = [{p.get("name") for c in w["spec"]["template"]["spec"]["containers"]
                  for p in c.get("ports", [])} for w in owners]
        ok = len(components) == 1 and all(p["targetPort"] in n for n in named for p in svc["spec"]["ports"])
        check(ok, f"Service {svc['metadata']['name']} selects the workloads of one component, on their named ports")

    models = {}
    for w in workers:
        models[w["metadata"]["name"]] = check_worker(checks, objs, docs, w)
    check(len(set(models.values())) == len(models), f"each model has one worker Deployment ({models})")
    mports = {flag([str(a) for a in w["spec"]["template"]["spec"]["containers"][0]["args"]], "--metrics-port")
              for w in workers}
    check(len(mports) == 1, f"every worker Deployment uses one --metrics-port, the one Prometheus scrapes ({mports})")
    mport = next(iter(mports))

    gateway = container("Deployment", "kestrel-gateway")
    gargs = [str(a) for a in gateway["args"]]
    check(gargs[:1] == ["gateway"], "the gateway Deployment runs `kestrel gateway`")
    check(flag(gargs, "--hostname") == "0.0.0.0", "the gateway listens on the pod address")
    check(gateway.get("readinessProbe", {}).get("httpGet", {}).get("path") == "/health",
          "gateway readiness is GET /health (503 while no worker is live)")
    check("httpGet" not in gateway.get("livenessProbe", {"httpGet": 1}),
          "gateway liveness does not restart it while no worker is live (not /health)")
    for w in workers:
        image = w["spec"]["template"]["spec"]["containers"][0]["image"]
        check(gateway["image"] == image, f"gateway and {w['metadata']['name']} run the same image")
    redis_svc = objs.get(("Service", "kestrel-redis"))
    url = flag(gargs, "--redis-url") or ""
    check(redis_svc is not None and url.startswith(f"redis://{redis_svc['metadata']['name']}:"),
          f"gateway --redis-url points at the Redis Service ({url})")

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

    adapter = yaml.safe_load(objs[("ConfigMap", "kestrel-adapter-rules")]["data"]["config.yaml"])
    rules = adapter.get("externalRules", [])
    served = {r["name"]["as"]: r for r in rules}
    hpas = [d for d in docs if d["kind"] == "HorizontalPodAutoscaler"]
    for w in workers:
        name, model = w["metadata"]["name"], models[w["metadata"]["name"]]
        mine = [h for h in hpas if (h["spec"]["scaleTargetRef"]["kind"], h["spec"]["scaleTargetRef"]["name"])
                == ("Deployment", name)]
        check(len(mine) == 1, f"{name} has one HPA")
        for hpa in mine:
            check_hpa(checks, hpa, model, served)
    check(len(hpas) == len(workers), "every HPA scales a worker Deployment")

    queries = []
    for r in rules:
        series = r["seriesQuery"].split('__name__="', 1)[1].split('"', 1)[0]
        q = r["metricsQuery"].replace("<<.Series>>", series)
        q = q.replace("<<.LabelMatchers>>", 'namespace="kestrel",model_name="chat"')
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
        check(*per_model_queue_depth(tmp.name))

    return checks.summary()


def check_worker(checks: Checklist, objs: dict, docs: list, w: dict) -> str:
    """The checks of one model's worker Deployment; returns its served model name."""
    check = checks.check
    name = w["metadata"]["name"]
    pod = w["spec"]["template"]
    worker = pod["spec"]["containers"][0]
    wargs = [str(a) for a in worker["args"]]
    check(wargs[:1] == ["worker"], f"{name} runs `kestrel worker`")
    model = flag(wargs, "--served-model-name") or ""
    check(bool(model) and pod["metadata"]["labels"].get("kestrel.dev/model") == model,
          f"{name} serves `{model}` (--served-model-name) and labels its pods kestrel.dev/model={model}")
    check(w["spec"]["selector"]["matchLabels"].get("kestrel.dev/model") == model,
          f"{name} selects only its model's pods")
    mport = flag(wargs, "--metrics-port")
    check(flag(wargs, "--metrics-host") == "0.0.0.0",
          f"{name}: the metrics port listens on the pod address (its default is 127.0.0.1)")
    ports = {p["name"]: p["containerPort"] for p in worker.get("ports", [])}
    check(str(ports.get("metrics")) == mport, f"{name}: the `metrics` port is --metrics-port {mport}")
    for probe in ["startupProbe", "readinessProbe", "livenessProbe"]:
        get = worker.get(probe, {}).get("httpGet", {})
        check(get.get("path") == "/health" and get.get("port") in ("metrics", ports.get("metrics")),
              f"{name} {probe} is GET /health on the metrics port")
    cpu = str(worker["resources"]["requests"]["cpu"])
    check(cpu == flag(wargs, "--threads"), f"{name}: CPU request {cpu} equals --threads")
    env = {e["name"]: e for e in worker.get("env", [])}
    wid = flag(wargs, "--worker-id") or ""
    var = wid[2:-1] if wid.startswith("$(") else ""
    check(env.get(var, {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.name",
          f"{name}: --worker-id {wid} is the pod name")
    redis_svc = objs.get(("Service", "kestrel-redis"))
    url = flag(wargs, "--redis-url") or ""
    check(redis_svc is not None and url.startswith(f"redis://{redis_svc['metadata']['name']}:"),
          f"{name} --redis-url points at the Redis Service ({url})")
    mounts = {m["name"] for m in worker.get("volumeMounts", [])}
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in pod["spec"].get("volumes", [])
              if "persistentVolumeClaim" in v}
    for vol, claim in claims.items():
        check(vol in mounts and ("PersistentVolumeClaim", claim) in objs,
              f"{name} mounts the claim {claim}, which exists")
    pdbs = [d for d in docs if d["kind"] == "PodDisruptionBudget"
            and d["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()]
    check(len(pdbs) == 1 and pdbs[0]["spec"]["selector"]["matchLabels"].get("kestrel.dev/model") == model,
          f"{name} has a PodDisruptionBudget of its own")
    return model


def check_hpa(checks: Checklist, hpa: dict, model: str, served: dict) -> None:
    """One model's HPA: its external metrics exist and select the model."""
    check = checks.check
    name = hpa["metadata"]["name"]
    external = [m["external"]["metric"] for m in hpa["spec"]["metrics"] if m["type"] == "External"]
    wanted = [m["name"] for m in external]
    check(sorted(wanted) == ["kestrel_queue_depth", "kestrel_worker_utilisation"],
          f"{name} uses the external metrics {wanted}")
    for m in external:
        check(m["name"] in served, f"prometheus-adapter serves {name}'s metric {m['name']}")
        check(m.get("selector", {}).get("matchLabels") == {"model_name": model},
              f"{name}'s {m['name']} selects model_name={model} only")
    check(*utilisation_target(hpa))
    behavior = hpa["spec"].get("behavior", {})
    check(behavior.get("scaleUp", {}).get("stabilizationWindowSeconds") == 0,
          f"{name} scales up at once (the 5-minute window is in the utilisation metric, so "
          "queue-depth bursts are not held back)")
    check(behavior.get("scaleDown", {}).get("stabilizationWindowSeconds", 0) >= 300,
          f"{name} scales in slowly (a scale-down stabilisation window of 5 minutes or more)")


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


# Utilisation 0.9 from minute 2 to minute 13, then 0.5 (two workers of the model `chat`, of
# max_num_seqs 16, running 14 + 15 sequences, then 8 + 8): the metric the HPA reads stays under
# the 80% target until the high level has lasted 5 minutes (under at 6m, over at 7m), stays above
# while it lasts, and falls under it again as soon as the level drops (13m). A worker of another
# model, full all along, must not count: the query is filled with the HPA's selector
# model_name="chat".
SUSTAINED_TEST = """
rule_files: [{rules}]
evaluation_interval: 30s
tests:
  - interval: 30s
    input_series:
      - series: 'kestrel:num_requests_running{{namespace="kestrel",instance="w1",model_name="chat"}}'
        values: '8x3 14x21 8x14'
      - series: 'kestrel:num_requests_running{{namespace="kestrel",instance="w2",model_name="chat"}}'
        values: '8x3 15x21 8x14'
      - series: 'kestrel:max_num_seqs{{namespace="kestrel",instance="w1",model_name="chat"}}'
        values: '16x40'
      - series: 'kestrel:max_num_seqs{{namespace="kestrel",instance="w2",model_name="chat"}}'
        values: '16x40'
      - series: 'kestrel:num_requests_running{{namespace="kestrel",instance="w3",model_name="small"}}'
        values: '16x40'
      - series: 'kestrel:max_num_seqs{{namespace="kestrel",instance="w3",model_name="small"}}'
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

# Two gateways report the same Redis backlog per model and priority: `chat` has 5 normal and 2
# high requests waiting, `small` 100 normal. The HPA of `chat` must read 7 (max over gateways,
# summed over priorities, that model only).
QUEUE_TEST = """
rule_files: [{rules}]
evaluation_interval: 30s
tests:
  - interval: 30s
    input_series:
      - series: 'kestrel:gateway_queue_depth{{namespace="kestrel",instance="g1",priority="normal",model_name="chat"}}'
        values: '5x4'
      - series: 'kestrel:gateway_queue_depth{{namespace="kestrel",instance="g2",priority="normal",model_name="chat"}}'
        values: '5x4'
      - series: 'kestrel:gateway_queue_depth{{namespace="kestrel",instance="g1",priority="high",model_name="chat"}}'
        values: '2x4'
      - series: 'kestrel:gateway_queue_depth{{namespace="kestrel",instance="g1",priority="normal",model_name="small"}}'
        values: '100x4'
    promql_expr_test:
      - expr: adapter_kestrel_queue_depth
        eval_time: 1m
        exp_samples: [{{labels: 'adapter_kestrel_queue_depth', value: 7}}]
"""


def per_model_queue_depth(rules_file: str) -> tuple[bool, str]:
    """A model's HPA reads that model's backlog alone (promtool)."""
    with tempfile.NamedTemporaryFile("w", suffix=".test.yml") as test:
        test.write(QUEUE_TEST.format(rules=rules_file))
        test.flush()
        res = subprocess.run(["promtool", "test", "rules", test.name], capture_output=True, text=True)
    return (res.returncode == 0, "a model's queue-depth metric is its own backlog (max over gateways, summed over priorities)"
            + ("" if res.returncode == 0 else f": {res.stdout}{res.stderr}"))


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
