"""The result of one check: the contract of docs/architecture.md, shared by agent and controller."""

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

# Evidence key of a measurement whose output was wrong (a copy, GEMM, memory kernel or all-reduce
# that did not return the expected data): a fault of the hardware or its driver, not a figure,
# so another process on the GPU does not make it INCONCLUSIVE (agent/check_run.py).
WRONG_DATA = "wrong_data"

# Worst first: the order used to pick a node's overall status.
SEVERITY = {FAIL: 5, ERROR: 4, INCONCLUSIVE: 3, WARN: 2, SKIP: 1, PASS: 0}


@dataclass
class CheckResult:
    """One verdict on one subject.

    id: check id, e.g. "hostbw.h2d"; subject: "node", "gpu0" or "gpu0->gpu1";
    threshold: human text of the rule applied, e.g. ">= 48.0 GB/s (FAIL below)";
    hint: likely cause and next step (empty on PASS); evidence: raw figures, samples, files;
    code: the reason code of a verdict that is not PASS (r9700ctl/data/codes.yaml: meaning, cause,
    next step, source), "" where none is assigned yet.
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
    code: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown status {self.status!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# Exit codes of a validation (README "Exit codes"): 0 all good, 1 warnings only, 2 something
# failed, 3 could not run (no GPU, a step timed out or crashed), 4 inconclusive: it ran, nothing
# failed, but something could not be judged (busy GPU, no threshold, too few or too noisy windows).
EXIT_CODES = {PASS: 0, WARN: 1, FAIL: 2, ERROR: 3, INCONCLUSIVE: 4}


def worst(statuses: list[str]) -> str:
    """The most severe status, PASS for an empty list."""
    return max(statuses, key=lambda s: SEVERITY[s], default=PASS)


def overall(statuses: list[str]) -> str:
    """A run's status: the worst result; SKIP next to a judged result counts as that result;
    nothing judged at all (no results, or SKIPs only) is INCONCLUSIVE, never a PASS."""
    judged = [s for s in statuses if s != SKIP]
    return worst(judged) if judged else INCONCLUSIVE


def exit_code_for(statuses: list[str]) -> int:
    """Exit code per the contract (EXIT_CODES) for a run with these result statuses."""
    return EXIT_CODES[overall(statuses)]
