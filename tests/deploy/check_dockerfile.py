#!/usr/bin/env python3
"""Checks the properties deploy/Dockerfile must have, by parsing it (no Docker engine needed).

* multi-stage: several FROM stages, and the final one copies its binary from a build stage;
* cargo dependency layer: a stage runs `cargo build` over manifests and stub sources only (its
  COPYs bring Cargo.toml/Cargo.lock or come from another stage), and a later stage built on it
  copies the real crates/ and builds again; every cargo build uses --locked;
* the final stage runs as a non-root USER, has a HEALTHCHECK on /health, ENTRYPOINT is the
  kestrel binary and CMD runs `serve` on 0.0.0.0;
* .dockerignore at the repository root keeps target/ and .git out of the build context;
* the skeleton stage's script, run here against this checkout, yields a workspace in which
  every target cargo knows (`cargo metadata --no-deps`) has a stub source, so the dependency
  build cannot fail on a missing target file, and no real source leaks into it.

Usage: check_dockerfile.py [deploy/Dockerfile]
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from checklist import Checklist  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)


def parse(text: str) -> tuple[dict[str, str], list[Stage]]:
    """Instructions with continuation lines joined and comments dropped."""
    lines: list[str] = []
    current = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if current and stripped.startswith("#"):
            continue  # a comment inside a continued instruction
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        current += stripped
        lines.append(current)
        current = ""
    if current:
        lines.append(current)

    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in lines:
        keyword, _, rest = line.partition(" ")
        keyword = keyword.upper()
        rest = rest.strip()
        if keyword == "FROM":
            m = re.match(r"(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?$", rest, re.I)
            if not m:
                raise ValueError(f"cannot parse FROM {rest!r}")
            stages.append(Stage(m.group(1), m.group(2)))
        elif not stages:
            if keyword == "ARG":
                name, _, default = rest.partition("=")
                args[name] = default
        else:
            stages[-1].instructions.append((keyword, rest))
    return args, stages


def exec_form(rest: str) -> list[str]:
    rest = rest.strip()
    if rest.startswith("["):
        return json.loads(rest)
    return shlex.split(rest)


def copy_sources(rest: str) -> tuple[str | None, list[str]]:
    """(--from stage or None, source paths) of a COPY."""
    words = shlex.split(rest)
    from_stage = None
    paths = []
    for w in words:
        if w.startswith("--from="):
            from_stage = w.split("=", 1)[1]
        elif not w.startswith("--"):
            paths.append(w)
    return from_stage, paths[:-1]


def check_skeleton(script: str) -> list[tuple[str, bool]]:
    """Runs the skeleton stage's script from the repository root (as `docker build` would after
    its COPYs), writing to a temporary directory instead of /skeleton."""
    out: list[tuple[str, bool]] = []
    tmp = Path(tempfile.mkdtemp(prefix="kestrel-skeleton-"))
    try:
        dest = tmp / "skeleton"
        r = subprocess.run(["sh", "-c", script.replace("/skeleton", str(dest))], cwd=ROOT,
                           capture_output=True, text=True)
        out.append((f"the skeleton script runs (rc {r.returncode}) {r.stderr.strip()}",
                    r.returncode == 0))
        if r.returncode != 0:
            return out
        meta = json.loads(subprocess.run(
            ["cargo", "metadata", "--no-deps", "--offline", "--format-version", "1",
             "--manifest-path", str(ROOT / "Cargo.toml")],
            check=True, capture_output=True, text=True).stdout)
        missing = []
        for pkg in meta["packages"]:
            for target in pkg["targets"]:
                rel = Path(target["src_path"]).resolve().relative_to(ROOT)
                if not (dest / rel).is_file():
                    missing.append(str(rel))
        out.append((f"every cargo target has a stub in the skeleton (missing: {missing})",
                    not missing))
        real = [str(p.relative_to(dest)) for p in dest.rglob("*.rs")
                if p.read_text().strip() not in ("", "fn main() {}")
                and p.name != "build.rs"]
        out.append((f"the skeleton holds stubs only, no real sources (found: {real})", not real))
        same = all((dest / f).read_bytes() == (ROOT / f).read_bytes()
                   for f in ["Cargo.toml", "Cargo.lock"])
        out.append(("the skeleton keeps Cargo.toml and Cargo.lock as they are", same))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def main() -> int:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "deploy" / "Dockerfile"
    checks = Checklist("dockerfile")
    check = checks.check

    _, stages = parse(path.read_text())
    by_name = {s.name: s for s in stages if s.name}
    final = stages[-1] if stages else Stage("", None)

    check(len(stages) >= 2, f"multi-stage build ({len(stages)} FROM stages)")
    final_copies = [copy_sources(r) for k, r in final.instructions if k == "COPY"]
    check(any(f in by_name for f, _ in final_copies),
          "the final stage copies its artifacts from an earlier stage (COPY --from)")

    def lineage(stage: Stage) -> list[Stage]:
        chain = [stage]
        while chain[-1].base in by_name:
            chain.append(by_name[chain[-1].base])
        return chain

    def builds(stage: Stage) -> bool:
        return any(k == "RUN" and "cargo build" in r for k, r in stage.instructions)

    def copies_real_crates(stage: Stage) -> bool:
        return any(k == "COPY" and f is None and any(p.rstrip("/") == "crates" for p in ps)
                   for k, r in stage.instructions if k == "COPY"
                   for f, ps in [copy_sources(r)])

    dep_stages = [s for s in stages if builds(s) and not copies_real_crates(s)
                  and all(f is not None or set(ps) <= {"Cargo.toml", "Cargo.lock", "./"}
                          for k, r in s.instructions if k == "COPY"
                          for f, ps in [copy_sources(r)])]
    check(bool(dep_stages), "a stage runs cargo build over manifests and stub sources only "
          "(the cached dependency layer)")
    src_stages = [s for s in stages if builds(s) and copies_real_crates(s)
                  and any(d in lineage(s)[1:] for d in dep_stages)]
    check(bool(src_stages), "a later stage built on it copies the real crates/ and builds again")
    cargo_runs = [r for s in stages for k, r in s.instructions if k == "RUN" and "cargo build" in r]
    check(bool(cargo_runs) and all("--locked" in r for r in cargo_runs),
          "every cargo build uses --locked")

    users = [r for k, r in final.instructions if k == "USER"]
    user = users[-1].split(":")[0] if users else ""
    check(bool(users) and user not in ("root", "0"),
          f"the final stage runs as a non-root USER (got {users[-1] if users else 'none'})")

    health = [r for k, r in final.instructions if k == "HEALTHCHECK"]
    check(len(health) == 1 and not health[0].upper().startswith("NONE") and "/health" in health[0],
          "the final stage has a HEALTHCHECK against /health")

    entry = [exec_form(r) for k, r in final.instructions if k == "ENTRYPOINT"]
    check(bool(entry) and any(Path(w).name == "kestrel" for w in entry[-1]),
          f"ENTRYPOINT runs kestrel (got {entry[-1] if entry else 'none'})")
    cmd = [exec_form(r) for k, r in final.instructions if k == "CMD"]
    check(bool(cmd) and cmd[-1][:1] == ["serve"] and "0.0.0.0" in cmd[-1],
          f"CMD is `serve` on 0.0.0.0 (got {cmd[-1] if cmd else 'none'})")
    exposed = " ".join(r for k, r in final.instructions if k == "EXPOSE").split()
    check("8000" in exposed, f"EXPOSE 8000 (got {exposed})")

    ignore = ROOT / ".dockerignore"
    entries = set(ignore.read_text().split()) if ignore.exists() else set()
    check({"target", ".git"} <= entries, ".dockerignore keeps target/ and .git out of the context")

    skeleton = by_name.get("skeleton")
    runs = [r for k, r in skeleton.instructions if k == "RUN"] if skeleton else []
    check(len(runs) == 1 and "/skeleton" in runs[0], "a `skeleton` stage writes /skeleton in one RUN")
    if len(runs) == 1 and shutil.which("cargo"):
        for what, ok in check_skeleton(runs[0]):
            check(ok, what)

    return checks.summary()


if __name__ == "__main__":
    sys.exit(main())
