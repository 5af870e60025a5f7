"""The result of one check: the contract of DESIGN.md, shared by agent and controller."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

PASS = "PASS"
WARN = "WARN"
FAIL = "FAIL"
SKIP = "SKIP"
ERROR = "ERROR"
INCONCLUSIVE = "INCONCLUSIVE"
STATUSES = (PASS, WARN, FAIL, SKIP, ERROR, INCONCLUSIVE)

# Worst first: the order used to pick a node's overall status.
SEVERITY = {FAIL: 5, ERROR: 4, INCONCLUSIVE: 3, WARN: 2, SKIP: 1, PASS: 0}


@dataclass
class CheckResult:
    """One verdict on one subject.

    id: check id, e.g. "hostbw.h2d"; subject: "node", "gpu0" or "gpu0->gpu1";
    threshold: human text of the rule applied, e.g. ">= 48.0 GB/s (FAIL below)";
    hint: likely cause and next step (empty on PASS); evidence: raw figures, samples, files.
    """

    id: str
    subject: str
    status: str
    metric: str = ""
    value: float | int | str | None = None
    unit: str = ""
    threshold: str = ""
    hint: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown status {self.status!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def worst(statuses: list[str]) -> str:
    """The most severe status, PASS for an empty list."""
    return max(statuses, key=lambda s: SEVERITY[s], default=PASS)


def exit_code_for(statuses: list[str]) -> int:
    """Exit codes per the contract: 0 good, 1 warnings only, 2 failed, 3 could not run."""
    w = worst(statuses)
    if w == FAIL:
        return 2
    if w in (ERROR, INCONCLUSIVE):
        return 3
    if w == WARN:
        return 1
    return 0
