"""Building the cluster's verdicts: one CheckResult per finding, its hint from the code's record."""

from __future__ import annotations

from typing import Any

from r9700ctl.agent import codes
from r9700ctl.agent.result import PASS, CheckResult


def verdict(
    check: str,
    subject: str,
    status: str,
    *,
    code: str = "",
    said: str = "",
    metric: str = "",
    value: float | int | str | None = None,
    unit: str = "",
    threshold: str = "",
    evidence: dict[str, Any] | None = None,
) -> CheckResult:
    """A verdict whose hint is what was found (`said`, with the figures) and the code's next step.

    Every verdict that is not PASS names a code of data/codes.yaml (KeyError for an unknown one).
    """
    if status != PASS and not code:
        raise ValueError(f"{check} {subject}: a {status} verdict needs a reason code")
    hint = said
    if code:
        step = codes.record(code).next
        hint = f"{said}; {step}" if said else step
    return CheckResult(
        id=check,
        subject=subject,
        status=status,
        metric=metric,
        value=value,
        unit=unit,
        threshold=threshold,
        hint=hint,
        evidence=dict(evidence or {}),
        code=code,
    )


def floor_verdict(
    check: str,
    subject: str,
    fraction: float,
    warn: float,
    fail: float,
    *,
    code: str,
    said: str,
    threshold: str,
    **common: Any,
) -> CheckResult:
    """A figure as a fraction of what it should reach: FAIL below `fail`, WARN below `warn`, else PASS."""
    from r9700ctl.agent.result import FAIL, WARN

    if fraction < fail:
        return verdict(check, subject, FAIL, code=code, said=said, threshold=threshold, **common)
    if fraction < warn:
        return verdict(check, subject, WARN, code=code, said=said, threshold=threshold, **common)
    return verdict(check, subject, PASS, said=said, threshold=threshold, **common)
