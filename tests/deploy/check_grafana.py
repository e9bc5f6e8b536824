#!/usr/bin/env python3
"""Static checks of deploy/grafana/kestrel.json (test_dashboard.py runs its queries).

* well-formed: a uid and title, unique panel ids, panels on the 24-column grid without overlaps,
  every query with a refId unique within its panel and a non-empty expression;
* what operators asked for is there: TTFT, inter-token and end-to-end latency at p50 and p99,
  output tokens/s, running and waiting requests, Redis queue depth, KV cache usage, preemptions,
  prefix-cache hit rate, and series per worker (`by (instance)`).

Usage: check_grafana.py [deploy/grafana/kestrel.json]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from checklist import Checklist  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

# (what, every substring one expression of the dashboard must contain)
REQUIRED = [
    ("TTFT p50", ["histogram_quantile(0.5,", "kestrel:time_to_first_token_seconds_bucket"]),
    ("TTFT p99", ["histogram_quantile(0.99,", "kestrel:time_to_first_token_seconds_bucket"]),
    ("inter-token p50", ["histogram_quantile(0.5,", "kestrel:inter_token_latency_seconds_bucket"]),
    ("inter-token p99", ["histogram_quantile(0.99,", "kestrel:inter_token_latency_seconds_bucket"]),
    ("E2E p50", ["histogram_quantile(0.5,", "kestrel:e2e_request_latency_seconds_bucket"]),
    ("E2E p99", ["histogram_quantile(0.99,", "kestrel:e2e_request_latency_seconds_bucket"]),
    ("client E2E p99 per route and model", ["histogram_quantile(0.99,", "by (route, model_name, le)",
                                            "kestrel:http_e2e_request_latency_seconds_bucket"]),
    ("output tokens/s", ["rate(kestrel:generation_tokens_total["]),
    ("running requests", ["kestrel:num_requests_running"]),
    ("waiting requests", ["kestrel:num_requests_waiting"]),
    ("queue depth", ["kestrel:gateway_queue_depth"]),
    ("KV cache usage", ["kestrel:kv_cache_usage_perc"]),
    ("heap fragmentation", ["kestrel:heap_fragmentation_perc"]),
    ("KV fragmentation", ["kestrel:kv_cache_fragmentation_perc"]),
    ("preemptions", ["rate(kestrel:num_preemptions_total["]),
    ("prefix-cache hit rate", ["kestrel:prefix_cache_hits_total", "/", "kestrel:prefix_cache_queries_total"]),
    ("utilisation", ["kestrel:num_requests_running / kestrel:max_num_seqs"]),
    ("per worker", ["by (instance"]),
]


def main() -> int:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "deploy" / "grafana" / "kestrel.json"
    dash = json.loads(path.read_text())
    checks = Checklist("grafana")
    check = checks.check

    check(bool(dash.get("uid")) and bool(dash.get("title")), "the dashboard has a uid and a title")
    panels = dash.get("panels", [])
    ids = [p.get("id") for p in panels]
    check(len(ids) == len(set(ids)) and None not in ids, "panel ids are unique")

    cells: dict[tuple[int, int], str] = {}
    overlaps = []
    for p in panels:
        g = p.get("gridPos", {})
        x, y, w, h = g.get("x", -1), g.get("y", -1), g.get("w", 0), g.get("h", 0)
        if x < 0 or y < 0 or w <= 0 or h <= 0 or x + w > 24:
            overlaps.append(f"{p.get('title')}: bad gridPos {g}")
            continue
        for cx in range(x, x + w):
            for cy in range(y, y + h):
                if (cx, cy) in cells:
                    overlaps.append(f"{p.get('title')} overlaps {cells[(cx, cy)]}")
                cells[(cx, cy)] = p.get("title", "?")
    check(not overlaps, f"panels sit on the grid without overlapping {sorted(set(overlaps))}")

    exprs = []
    for p in panels:
        if p.get("type") == "row":
            continue
        targets = p.get("targets", [])
        refs = [t.get("refId") for t in targets]
        ok = bool(targets) and len(refs) == len(set(refs)) and all(refs) \
            and all(t.get("expr", "").strip() for t in targets)
        check(ok, f"panel {p.get('title')!r} has queries with unique refIds and expressions")
        exprs += [t.get("expr", "") for t in targets]

    for what, parts in REQUIRED:
        check(any(all(s in e for s in parts) for e in exprs), f"a panel shows {what}")

    return checks.summary()


if __name__ == "__main__":
    sys.exit(main())
