"""The kestrel:* series names the deployment files may use.

Engine and HTTP series are read from the Rust sources (every "kestrel:..." string literal of
crates/engine/src/metrics.rs and crates/server/src/metrics.rs), so a renamed metric breaks the
checks. The gateway's series are those its interface specifies.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SOURCES = [
    ROOT / "crates" / "engine" / "src" / "metrics.rs",
    ROOT / "crates" / "server" / "src" / "metrics.rs",
]

# `kestrel gateway`'s own series (it also exports kestrel:http_*).
GATEWAY_SERIES = {
    "kestrel:gateway_queue_depth",
    "kestrel:gateway_live_workers",
    "kestrel:gateway_refused_workers",
    "kestrel:gateway_redeliveries_total",
    "kestrel:gateway_requests_rejected_total",
    "kestrel:gateway_time_to_first_token_seconds",
    "kestrel:gateway_e2e_request_latency_seconds",
}

GATEWAY_HISTOGRAMS = {
    "kestrel:gateway_time_to_first_token_seconds",
    "kestrel:gateway_e2e_request_latency_seconds",
}


def source_series() -> set[str]:
    names: set[str] = set()
    for path in SOURCES:
        names |= set(re.findall(r'"(kestrel:[a-z0-9_:]+)"', path.read_text()))
    return names


def gateway_exported() -> set[str]:
    """Names as Prometheus stores them: histograms as _bucket, _sum and _count."""
    out = GATEWAY_SERIES - GATEWAY_HISTOGRAMS
    for h in GATEWAY_HISTOGRAMS:
        out |= {h + "_bucket", h + "_sum", h + "_count"}
    return out


def referenced(expr: str) -> set[str]:
    return set(re.findall(r"kestrel:[A-Za-z0-9_:]*[A-Za-z0-9_]", expr))


def unknown(expr: str) -> set[str]:
    """Names in expr that are neither an exported series nor one with a histogram suffix."""
    known = source_series() | GATEWAY_SERIES
    bad = set()
    for name in referenced(expr):
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        if name not in known and base not in known:
            bad.add(name)
    return bad
