"""The one verdict model of r9700ctl: statuses, their order, and the result of one check.

Every verdict r9700ctl gives is a CheckResult: the agent's checks, preflight and doctor, the
bundle diagnosis, the fleet judge, history comparisons and the lifecycle gates. The contract of
docs/architecture.md; standard library only (it runs on nodes inside the agent).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

PASS = "PASS"
WARN = "WARN"
FAIL = "FAIL"
SKIP = "SKIP"
ERROR = "ERROR"
INCONCLUSIVE = "INCONCLUSIVE"
# The one list of statuses. SKIP: not run, or reported only (a note: a bundle's INFO finding is a
# SKIP); INCONCLUSIVE: ran, but could not be judged (never a PASS).
STATUSES = (PASS, WARN, FAIL, SKIP, ERROR, INCONCLUSIVE)
# Statuses that ask nothing of anyone: it passed, or it did not run or was reported only. Every
# other status is something to read (a table's rows, the worst finding, a known issue's evidence).
QUIET = (PASS, SKIP)
# Statuses that judged nothing of the hardware: a step that could not run, or ran without a verdict.
# Their figures are not the card's (the fleet judge leaves them out).
NOT_JUDGED = (ERROR, INCONCLUSIVE)

# Evidence key of a measurement whose output was wrong (a copy, GEMM, memory kernel or all-reduce
# that did not return the expected data): a fault of the hardware or its driver, not a figure,
# so another process on the GPU does not make it INCONCLUSIVE (agent/check_run.py).
WRONG_DATA = "wrong_data"

# The one severity order, worst first, for every verdict (a node's overall status, the fleet, a
# bundle, the lifecycle gate's "got worse"). FAIL ranks above ERROR: a FAIL is a fault that was
# judged, with a next step to act on; an ERROR says only that a step could not run, nothing about
# the hardware. So a run with both exits 2 ("something failed"), and a FAIL found on one node
# outranks another node's ERROR or INCONCLUSIVE (README "Exit codes").
SEVERITY = {FAIL: 5, ERROR: 4, INCONCLUSIVE: 3, WARN: 2, SKIP: 1, PASS: 0}


# The tests install a check that every verdict which is not PASS names a catalogued code
# (tests/conftest.py): a missing code fails the test that built the verdict. On a node a verdict
# without a code still reports, since its figures matter more than its name.
code_check: Callable[[CheckResult], None] | None = None


@dataclass(kw_only=True)
class CheckResult:
    """One verdict on one subject (keyword arguments only: nine fields read badly by position).

    id: check id, e.g. "hostbw.h2d"; subject: "node", "gpu0", "gpu0->gpu1" or a host;
    threshold: human text of the rule applied, e.g. ">= 48.0 GB/s (FAIL below)";
    hint: likely cause and next step (empty on PASS); evidence: raw figures, samples, files;
    code: the reason code of a verdict that is not PASS (r9700ctl/data/codes.yaml: meaning,
    cause, next step, source); detail: what was found, in words, where the figure alone does not
    say it (preflight, doctor and bundle findings).
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
    detail: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown status {self.status!r}")
        if self.status == PASS:
            self.code = ""  # a code names what is wrong; a check may pass one whatever its verdict
        elif code_check is not None:
            code_check(self)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def finding(
    id: str,
    status: str,
    detail: str,
    fix: str = "",
    evidence: dict[str, Any] | None = None,
    *,
    code: str = "",
    subject: str = "node",
) -> CheckResult:
    """A verdict stated in words (preflight, doctor's SSH checks, a bundle rule): what was found
    (`detail`), the fix (its hint), the evidence and, unless it passed, its reason code."""
    return CheckResult(
        id=id,
        subject=subject,
        status=status,
        detail=detail,
        hint=fix,
        evidence=dict(evidence or {}),
        code=code,
    )


def one_line(result: CheckResult) -> str:
    """What was found, then the fix: how a refused host is summed up in one line."""
    said = result.detail or result.hint
    return f"{said} (fix: {result.hint})" if result.hint and result.detail else said


# Exit codes of a validation (README "Exit codes"): 0 all good, 1 warnings only, 2 something
# failed, 3 could not run (no GPU, a step timed out or crashed), 4 inconclusive: it ran, nothing
# failed, but something could not be judged (busy GPU, no threshold, too few or too noisy windows).
EXIT_CODES = {PASS: 0, WARN: 1, FAIL: 2, ERROR: 3, INCONCLUSIVE: 4}


def worst_first(results: Iterable[CheckResult]) -> list[CheckResult]:
    """The verdicts a summary lists: every one that is not PASS (nothing to say) nor SKIP (a note),
    worst first by SEVERITY, in their order within a status."""
    return sorted((r for r in results if r.status not in (PASS, SKIP)), key=lambda r: -SEVERITY[r.status])


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
