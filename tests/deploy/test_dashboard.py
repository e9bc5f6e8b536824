#!/usr/bin/env python3
"""Every PromQL expression of deploy/grafana/kestrel.json against a real Prometheus.

Starts `kestrel serve` on a free 127.0.0.1 port, a real Prometheus (Debian's package) scraping it
every second with its own temporary data directory and deploy/prometheus/alerts.yml loaded,
sends two waves of real completion requests (`kestrel bench`, plus a repeated prompt for the
prefix cache), and then evaluates every panel expression through /api/v1/query.

Each panel expression must be in exactly one of two lists below:

* SERVE_EXPRS: answered by the series `kestrel serve` exports (the engine's kestrel:* series and
  the HTTP server's kestrel:http_*). In the fleet the workers export the engine series and the
  gateway the HTTP ones, so the same expressions work there.
* GATEWAY_EXPRS: answered only by `kestrel gateway` (kestrel:gateway_*). They are checked for
  data only when a scrape target of job "kestrel-gateway" is configured (the fleet below).
  Without one (a kestrel binary without the gateway subcommand, or --fleet off), they are
  still sent to Prometheus, which must accept them (a syntax error fails), and every metric
  they name must be one of the gateway's documented series (GATEWAY_METRICS), so a misspelt
  name fails too.

An expression in neither list fails the test: a new panel has to be classified here.

For every checked expression: the query succeeds, returns at least one series, at least one
value is a finite number, and every kestrel:* metric it names has been ingested by Prometheus.
Also checked: all scrape targets are up, kestrel:max_num_seqs equals the --max-num-seqs given to
the server, and every alerting rule of alerts.yml evaluates without error on the real series.

The scrape targets are a list of Target values built by start_targets(): always a
`kestrel serve`, and, when the binary has the `gateway` subcommand (--fleet auto, the default),
a Redis server, a `kestrel worker` and a `kestrel gateway` too (start_fleet()); each wave of
traffic then goes to the server and through the gateway. --fleet off leaves the fleet out, and
already running processes can be added with --target JOB=HOST:PORT (--traffic-url sends the
requests to them).

Usage: test_dashboard.py --kestrel target/release/kestrel [--model PATH] [--prometheus BIN]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from metric_names import gateway_exported, referenced  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "kestrel.json"
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"

# Grafana's $__rate_interval, replaced by a fixed window that spans both traffic waves.
RATE_WINDOW = "30s"
SCRAPE_INTERVAL = "1s"
# Distinct batch sizes, so that kestrel:max_num_seqs is seen to come from each engine's flag.
SERVE_MAX_NUM_SEQS = 8
WORKER_MAX_NUM_SEQS = 4

SERVE_EXPRS = [
    'histogram_quantile(0.5, sum by (le) (rate(kestrel:time_to_first_token_seconds_bucket[$__rate_interval])))',
    'histogram_quantile(0.99, sum by (le) (rate(kestrel:time_to_first_token_seconds_bucket[$__rate_interval])))',
    'histogram_quantile(0.99, sum by (instance, le) (rate(kestrel:time_to_first_token_seconds_bucket[$__rate_interval])))',
    'histogram_quantile(0.5, sum by (le) (rate(kestrel:inter_token_latency_seconds_bucket[$__rate_interval])))',
    'histogram_quantile(0.99, sum by (le) (rate(kestrel:inter_token_latency_seconds_bucket[$__rate_interval])))',
    'histogram_quantile(0.99, sum by (instance, le) (rate(kestrel:inter_token_latency_seconds_bucket[$__rate_interval])))',
    'histogram_quantile(0.5, sum by (le) (rate(kestrel:e2e_request_latency_seconds_bucket[$__rate_interval])))',
    'histogram_quantile(0.99, sum by (le) (rate(kestrel:e2e_request_latency_seconds_bucket[$__rate_interval])))',
    'histogram_quantile(0.99, sum by (instance, le) (rate(kestrel:e2e_request_latency_seconds_bucket[$__rate_interval])))',
    'histogram_quantile(0.99, sum by (route, model_name, le) (rate(kestrel:http_e2e_request_latency_seconds_bucket[$__rate_interval])))',
    'histogram_quantile(0.5, sum by (le) (rate(kestrel:request_queue_time_seconds_bucket[$__rate_interval])))',
    'histogram_quantile(0.99, sum by (le) (rate(kestrel:request_queue_time_seconds_bucket[$__rate_interval])))',
    'sum(rate(kestrel:generation_tokens_total[$__rate_interval]))',
    'sum by (instance) (rate(kestrel:generation_tokens_total[$__rate_interval]))',
    'sum(rate(kestrel:prompt_tokens_total[$__rate_interval]))',
    'sum by (instance) (rate(kestrel:prompt_tokens_total[$__rate_interval]))',
    'sum by (finished_reason) (rate(kestrel:request_success_total[$__rate_interval]))',
    'sum by (job, status) (rate(kestrel:http_requests_total{route!~"/health|/metrics"}[$__rate_interval]))',
    '(sum(rate(kestrel:http_requests_total{status=~"5..", route!~"/health|/metrics"}[$__rate_interval])) or vector(0)) / sum(rate(kestrel:http_requests_total{route!~"/health|/metrics"}[$__rate_interval]))',
    'histogram_quantile(0.5, sum by (le) (rate(kestrel:iteration_tokens_total_bucket[$__rate_interval])))',
    'histogram_quantile(0.99, sum by (le) (rate(kestrel:iteration_tokens_total_bucket[$__rate_interval])))',
    'histogram_quantile(0.5, sum by (le) (rate(kestrel:iteration_forward_seconds_bucket[$__rate_interval])))',
    'histogram_quantile(0.99, sum by (le) (rate(kestrel:iteration_forward_seconds_bucket[$__rate_interval])))',
    'histogram_quantile(0.5, sum by (le) (rate(kestrel:iteration_sampling_seconds_bucket[$__rate_interval])))',
    'histogram_quantile(0.99, sum by (le) (rate(kestrel:iteration_sampling_seconds_bucket[$__rate_interval])))',
    'sum by (instance) (kestrel:num_requests_running)',
    'sum by (instance) (kestrel:num_requests_waiting)',
    'kestrel:num_requests_running / kestrel:max_num_seqs',
    'max by (instance) (kestrel:kv_cache_usage_perc)',
    'max by (instance) (kestrel:heap_fragmentation_perc)',
    'max by (instance) (kestrel:kv_cache_fragmentation_perc)',
    'sum by (instance) (rate(kestrel:num_preemptions_total[$__rate_interval]))',
    'sum by (instance) (rate(kestrel:prefix_cache_hits_total[$__rate_interval])) / sum by (instance) (rate(kestrel:prefix_cache_queries_total[$__rate_interval]))',
]

GATEWAY_EXPRS = [
    'histogram_quantile(0.5, sum by (le) (rate(kestrel:gateway_time_to_first_token_seconds_bucket[$__rate_interval])))',
    'histogram_quantile(0.99, sum by (le) (rate(kestrel:gateway_time_to_first_token_seconds_bucket[$__rate_interval])))',
    'histogram_quantile(0.5, sum by (le) (rate(kestrel:gateway_e2e_request_latency_seconds_bucket[$__rate_interval])))',
    'histogram_quantile(0.99, sum by (le) (rate(kestrel:gateway_e2e_request_latency_seconds_bucket[$__rate_interval])))',
    'max by (priority) (kestrel:gateway_queue_depth)',
    'max(kestrel:gateway_live_workers)',
]

# The series `kestrel gateway` exports (besides kestrel:http_*), as its interface specifies.
GATEWAY_METRICS = gateway_exported()

# Repeated verbatim so that its second run finds its blocks in the prefix cache.
REPEATED_PROMPT = (
    "Kestrel is a small falcon that hovers over open fields, watching the grass for voles, "
    "mice and grasshoppers before it drops onto its prey."
)


@dataclass
class Target:
    job: str  # scrape job name: kestrel-serve, kestrel-gateway or kestrel-worker
    address: str  # host:port serving /metrics


@dataclass
class Started:
    name: str
    proc: subprocess.Popen
    log: Path


class Failures:
    def __init__(self) -> None:
        self.items: list[str] = []
        self.passed = 0

    def check(self, ok: bool, what: str) -> bool:
        if ok:
            self.passed += 1
            print(f"ok    {what}")
        else:
            self.items.append(what)
            print(f"FAIL  {what}")
        return ok


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def http_post_json(url: str, body: dict, timeout: float = 60.0) -> dict:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def wait_until(predicate, timeout: float, what: str, procs: list[Started]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in procs:
            if p.proc.poll() is not None:
                raise RuntimeError(f"{p.name} exited early:\n{p.log.read_text(errors='replace')}")
        try:
            if predicate():
                return
        except OSError:
            pass
        time.sleep(0.25)
    raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}")


def start_process(name: str, argv: list[str], workdir: Path) -> Started:
    log = workdir / f"{name}.log"
    fh = open(log, "wb")
    proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    return Started(name, proc, log)


def start_kestrel(kestrel: str, name: str, args: list[str], health_url: str, workdir: Path,
                  started: list[Started], timeout: float = 120) -> None:
    """Starts `kestrel ARGS` and waits until health_url answers 200."""
    p = start_process(name, [kestrel, *args], workdir)
    started.append(p)
    wait_until(lambda: http_get(health_url, 2)[0] == 200, timeout, f"{name} /health", [p])


def has_fleet(kestrel: str) -> bool:
    """Whether this kestrel binary has the `gateway` and `worker` subcommands."""
    return all(
        subprocess.run([kestrel, cmd, "--help"], capture_output=True).returncode == 0
        for cmd in ["gateway", "worker"]
    )


def start_fleet(args, workdir: Path, started: list[Started]) -> tuple[list[Target], str]:
    """A Redis server (no persistence, in the work dir), one `kestrel worker` and one
    `kestrel gateway`, all on 127.0.0.1; returns their targets and the gateway's URL."""
    redis_port = free_port()
    p = start_process("redis", [
        args.redis_server, "--bind", "127.0.0.1", "--port", str(redis_port), "--save", "",
        "--appendonly", "no", "--dir", str(workdir),
    ], workdir)
    started.append(p)

    def redis_up() -> bool:
        with socket.create_connection(("127.0.0.1", redis_port), timeout=1) as c:
            c.sendall(b"PING\r\n")
            return c.recv(16).startswith(b"+PONG")

    wait_until(redis_up, 30, "redis-server", [p])
    redis_url = f"redis://127.0.0.1:{redis_port}"
    metrics_port = free_port()
    worker_args = [
        "worker", "--redis-url", redis_url, "--worker-id", "dashboard-test",
        "--threads", "2", "--max-num-seqs", str(WORKER_MAX_NUM_SEQS),
        "--metrics-port", str(metrics_port),
    ]
    if args.model:
        worker_args += ["--model", args.model]
    start_kestrel(args.kestrel, "kestrel-worker", worker_args,
                  f"http://127.0.0.1:{metrics_port}/health", workdir, started)
    port = free_port()
    gateway = f"http://127.0.0.1:{port}"
    # Its /health answers 200 once it sees a live worker.
    start_kestrel(args.kestrel, "kestrel-gateway", [
        "gateway", "--redis-url", redis_url, "--hostname", "127.0.0.1", "--port", str(port),
    ], f"{gateway}/health", workdir, started)
    return [Target("kestrel-worker", f"127.0.0.1:{metrics_port}"),
            Target("kestrel-gateway", f"127.0.0.1:{port}")], gateway


def start_targets(args, workdir: Path, started: list[Started]) -> tuple[list[Target], list[str]]:
    """Starts what Prometheus scrapes; returns the targets and the base URLs for traffic.

    A `kestrel serve` with a KV cache small enough (160 tokens) that four concurrent requests
    of 32 + 32 tokens preempt each other, so the preemption series exists; then the fleet.
    """
    port = free_port()
    serve_args = [
        "serve", "--hostname", "127.0.0.1", "--port", str(port), "--threads", "2",
        "--kv-cache-tokens", "160", "--max-num-seqs", str(SERVE_MAX_NUM_SEQS),
    ]
    if args.model:
        serve_args += ["--model", args.model]
    base = f"http://127.0.0.1:{port}"
    start_kestrel(args.kestrel, "kestrel-serve", serve_args, f"{base}/health", workdir, started)
    targets = [Target("kestrel-serve", f"127.0.0.1:{port}")]
    urls = [base]
    fleet = args.fleet == "on" or (args.fleet == "auto" and has_fleet(args.kestrel))
    if fleet:
        fleet_targets, gateway = start_fleet(args, workdir, started)
        targets += fleet_targets
        urls.append(gateway)
    for spec in args.target:
        job, _, address = spec.partition("=")
        targets.append(Target(job, address))
    if args.traffic_url:
        urls.append(args.traffic_url)
    return targets, urls


def prometheus_config(targets: list[Target]) -> str:
    jobs: dict[str, list[str]] = {}
    for t in targets:
        jobs.setdefault(t.job, []).append(t.address)
    cfg = {
        "global": {"scrape_interval": SCRAPE_INTERVAL, "evaluation_interval": SCRAPE_INTERVAL},
        "rule_files": [str(ALERTS)],
        "scrape_configs": [
            {"job_name": job, "static_configs": [{"targets": addrs}]}
            for job, addrs in jobs.items()
        ],
    }
    return json.dumps(cfg, indent=2)  # JSON is YAML


def start_prometheus(binary: str, targets: list[Target], workdir: Path,
                     started: list[Started]) -> str:
    cfg = workdir / "prometheus.yml"
    cfg.write_text(prometheus_config(targets))
    port = free_port()
    p = start_process("prometheus", [
        binary,
        f"--config.file={cfg}",
        f"--storage.tsdb.path={workdir / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--storage.tsdb.retention.time=1h",
    ], workdir)
    started.append(p)
    url = f"http://127.0.0.1:{port}"
    wait_until(lambda: http_get(f"{url}/-/ready", 2)[0] == 200, 60, "Prometheus ready", [p])
    return url


def query(prom: str, expr: str) -> dict:
    status, body = http_get(f"{prom}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
    try:
        return json.loads(body)
    except ValueError:
        return {"status": "error", "error": f"HTTP {status}: {body[:200]!r}"}


def send_traffic(kestrel: str, base: str) -> None:
    """One wave: `kestrel bench` (8 prompts, 4 at a time, 32 tokens in and out) and the same
    prompt twice in a row."""
    subprocess.run(
        [kestrel, "bench", "--base-url", base, "--num-prompts", "8", "--concurrency", "4",
         "--input-len", "32", "--output-len", "32", "--no-progress"],
        check=True, stdout=subprocess.DEVNULL, timeout=120,
    )
    model = json.loads(http_get(f"{base}/v1/models")[1])["data"][0]["id"]
    for _ in range(2):
        http_post_json(f"{base}/v1/completions",
                       {"model": model, "prompt": REPEATED_PROMPT, "max_tokens": 4})


def dashboard_exprs(path: Path) -> list[tuple[str, str]]:
    dash = json.loads(path.read_text())
    out = []

    def walk(panels):
        for p in panels:
            for t in p.get("targets", []):
                out.append((p.get("title", "?"), t.get("expr", "")))
            walk(p.get("panels", []))

    walk(dash.get("panels", []))
    return out


def is_finite_number(v: str) -> bool:
    try:
        return math.isfinite(float(v))
    except ValueError:
        return False


def check_with_data(prom: str, title: str, expr: str, ingested: set[str], f: Failures) -> None:
    missing = referenced(expr) - ingested
    f.check(not missing, f"[{title}] names ingested series: {expr}"
            + (f" (never scraped: {sorted(missing)})" if missing else ""))
    r = query(prom, expr.replace("$__rate_interval", RATE_WINDOW))
    if not f.check(r.get("status") == "success", f"[{title}] query accepted: {expr}"
                   + ("" if r.get("status") == "success" else f" ({r.get('error')})")):
        return
    result = r["data"]["result"]
    values = [s["value"][1] for s in result] if r["data"]["resultType"] == "vector" else []
    f.check(bool(result), f"[{title}] returns data: {expr}")
    if result:
        f.check(any(is_finite_number(v) for v in values),
                f"[{title}] has a finite value (got {values}): {expr}")


def check_without_data(prom: str, title: str, expr: str, f: Failures) -> None:
    unknown = referenced(expr) - GATEWAY_METRICS
    f.check(not unknown, f"[{title}] names only gateway series: {expr}"
            + (f" (not a gateway series: {sorted(unknown)})" if unknown else ""))
    r = query(prom, expr.replace("$__rate_interval", RATE_WINDOW))
    f.check(r.get("status") == "success", f"[{title}] query accepted: {expr}"
            + ("" if r.get("status") == "success" else f" ({r.get('error')})"))


def run(args) -> int:
    f = Failures()
    exprs = dashboard_exprs(Path(args.dashboard))
    f.check(len(exprs) > 0, f"{args.dashboard} has panel expressions")
    for title, expr in exprs:
        if expr in SERVE_EXPRS and expr in GATEWAY_EXPRS:
            f.check(False, f"[{title}] expression is in both lists: {expr}")
        elif expr not in SERVE_EXPRS and expr not in GATEWAY_EXPRS:
            f.check(False, f"[{title}] expression is in neither SERVE_EXPRS nor GATEWAY_EXPRS "
                    f"(a new or misspelt panel query; classify it in {Path(__file__).name}): {expr}")
        leftover = re.findall(r"\$\w+", expr.replace("$__rate_interval", ""))
        if leftover:
            f.check(False, f"[{title}] uses dashboard variables this test cannot fill: {leftover}")

    workdir = Path(tempfile.mkdtemp(prefix="kestrel-dashboard-test-"))
    started: list[Started] = []
    t0 = time.monotonic()
    try:
        targets, traffic_urls = start_targets(args, workdir, started)
        prom = start_prometheus(args.prometheus, targets, workdir, started)
        jobs = {t.job for t in targets}
        print(f"targets: {[(t.job, t.address) for t in targets]}; traffic to {traffic_urls}")

        def all_up() -> bool:
            r = query(prom, "up")
            return r.get("status") == "success" and len(r["data"]["result"]) == len(targets) \
                and all(s["value"][1] == "1" for s in r["data"]["result"])

        wait_until(all_up, 30, "every target scraped and up", started)
        f.check(True, "every scrape target is up")

        # Wave one creates the series; wave two, a few scrapes later, makes them grow, so rates
        # and quantiles over RATE_WINDOW have real values.
        for url in traffic_urls:
            send_traffic(args.kestrel, url)
        time.sleep(3)
        for url in traffic_urls:
            send_traffic(args.kestrel, url)
        time.sleep(4)

        names = query(prom, 'count by (__name__) ({__name__=~"kestrel:.+"})')
        ingested = {s["metric"]["__name__"] for s in names["data"]["result"]}
        print(f"ingested {len(ingested)} kestrel:* series names")

        for job, want in [("kestrel-serve", SERVE_MAX_NUM_SEQS),
                          ("kestrel-worker", WORKER_MAX_NUM_SEQS)]:
            if job not in jobs:
                continue
            r = query(prom, f'kestrel:max_num_seqs{{job="{job}"}}')
            got = [s["value"][1] for s in r["data"]["result"]]
            f.check(got == [str(want)],
                    f"kestrel:max_num_seqs of {job} is its --max-num-seqs {want} (got {got})")

        has_gateway = "kestrel-gateway" in jobs
        if not has_gateway:
            print("no kestrel-gateway target: GATEWAY_EXPRS are checked for syntax and metric "
                  "names only, not for data")
        for title, expr in exprs:
            if expr in SERVE_EXPRS or (expr in GATEWAY_EXPRS and has_gateway):
                check_with_data(prom, title, expr, ingested, f)
            elif expr in GATEWAY_EXPRS:
                check_without_data(prom, title, expr, f)

        status, body = http_get(f"{prom}/api/v1/rules")
        groups = json.loads(body)["data"]["groups"] if status == 200 else []
        rules = [r for g in groups for r in g["rules"]]
        f.check(len(rules) > 0, f"Prometheus loaded {len(rules)} rules from {ALERTS.name}")
        for rule in rules:
            f.check(rule.get("health") == "ok" and not rule.get("lastError"),
                    f"alert {rule['name']} evaluates on the real series"
                    + (f" ({rule.get('lastError')})" if rule.get("lastError") else ""))
    except (RuntimeError, subprocess.SubprocessError, OSError, KeyError, ValueError) as e:
        f.check(False, f"harness: {e}")
    finally:
        for p in reversed(started):
            if p.proc.poll() is None:
                p.proc.terminate()
                try:
                    p.proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    p.proc.kill()
                    p.proc.wait()
        if f.items:
            for p in started:
                print(f"--- {p.name} log (last 40 lines) ---")
                print("\n".join(p.log.read_text(errors="replace").splitlines()[-40:]))
        if args.keep_workdir:
            print(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"dashboard test took {time.monotonic() - t0:.1f}s")
    print(f"dashboard: {f.passed} passed, {len(f.items)} failed")
    return 1 if f.items else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kestrel", required=True, help="path to the kestrel binary")
    ap.add_argument("--model", default=os.environ.get("KESTREL_DEFAULT_MODEL") or None,
                    help="model for kestrel serve [default: $KESTREL_DEFAULT_MODEL, else "
                    "serve's default]")
    ap.add_argument("--prometheus", default=shutil.which("prometheus") or "prometheus")
    ap.add_argument("--dashboard", default=str(DASHBOARD))
    ap.add_argument("--fleet", choices=["auto", "on", "off"], default="auto",
                    help="also run Redis, a worker and a gateway (auto: when the kestrel "
                    "binary has the gateway subcommand)")
    ap.add_argument("--redis-server", default=shutil.which("redis-server") or "redis-server")
    ap.add_argument("--target", action="append", default=[], metavar="JOB=HOST:PORT",
                    help="an extra, already running scrape target (repeatable)")
    ap.add_argument("--traffic-url", help="also send the requests here (e.g. to a gateway "
                    "given with --target)")
    ap.add_argument("--keep-workdir", action="store_true")
    return run(ap.parse_args())


if __name__ == "__main__":
    sys.exit(main())
