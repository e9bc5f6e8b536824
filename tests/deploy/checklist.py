"""A list of named checks that prints each result and sums them up, shared by the deploy/
checkers: `checks = Checklist("k8s")`, `checks.check(ok, "what")`, `return checks.summary()`."""

from __future__ import annotations


class Checklist:
    def __init__(self, name: str) -> None:
        self.name = name
        self.passed = 0
        self.failures: list[str] = []

    def check(self, ok: bool, what: str) -> None:
        print(("ok    " if ok else "FAIL  ") + what)
        if ok:
            self.passed += 1
        else:
            self.failures.append(what)

    def failed(self) -> bool:
        return bool(self.failures)

    def summary(self) -> int:
        """Prints the totals; the process exit code (1 if any check failed)."""
        print(f"{self.name}: {self.passed} passed, {len(self.failures)} failed")
        return 1 if self.failures else 0
