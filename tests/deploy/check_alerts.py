#!/usr/bin/env python3
"""Checks deploy/prometheus/alerts.yml beyond what promtool does.

* every alert of alerts.yml is exercised by alerts.test.yml at least once firing (non-empty
  exp_alerts) and at least once not firing (empty exp_alerts), and the test file names no alert
  that does not exist;
* every kestrel:* series an alert uses is one Kestrel exports (metric_names.py);
* every alert has a severity label (critical or warning), a summary, a description and a
  runbook_url pointing at a heading of docs/deployment.md that exists.

Usage: check_alerts.py (needs PyYAML)
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from checklist import Checklist  # noqa: E402
from metric_names import unknown  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"
TESTS = ROOT / "deploy" / "prometheus" / "alerts.test.yml"
DOCS = ROOT / "docs" / "deployment.md"


def anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    out = set()
    for line in markdown.splitlines():
        m = re.match(r"#{1,6}\s+(.*)", line)
        if m:
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            out.add(slug)
    return out


def main() -> int:
    checks = Checklist("alerts")
    check = checks.check

    rules = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    alerts = {r["alert"]: r for r in rules if "alert" in r}
    tests = yaml.safe_load(TESTS.read_text())["tests"]
    firing: set[str] = set()
    quiet: set[str] = set()
    named: set[str] = set()
    for t in tests:
        for case in t.get("alert_rule_test", []):
            named.add(case["alertname"])
            (firing if case.get("exp_alerts") else quiet).add(case["alertname"])

    check(len(alerts) > 0, f"{RULES.name} defines {len(alerts)} alerts")
    for name in sorted(alerts):
        check(name in firing, f"{name} has a firing test case")
        check(name in quiet, f"{name} has a not-firing test case")
    for name in sorted(named - set(alerts)):
        check(False, f"{TESTS.name} tests {name}, which {RULES.name} does not define")

    heads = anchors(DOCS.read_text()) if DOCS.exists() else set()
    for name, rule in sorted(alerts.items()):
        labels = rule.get("labels", {})
        ann = rule.get("annotations", {})
        bad = unknown(rule["expr"])
        check(not bad, f"{name} uses only exported kestrel:* series (unknown: {sorted(bad)})")
        check(labels.get("severity") in ("critical", "warning"),
              f"{name} has severity critical or warning")
        check(bool(ann.get("summary")) and bool(ann.get("description")),
              f"{name} has a summary and a description")
        url = ann.get("runbook_url", "")
        path, _, anchor = url.partition("#")
        check(path == "docs/deployment.md" and anchor in heads,
              f"{name} runbook_url {url!r} points at a heading of docs/deployment.md")

    return checks.summary()


if __name__ == "__main__":
    sys.exit(main())
