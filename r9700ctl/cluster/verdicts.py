"""Building the cluster's verdicts: one CheckResult per finding, its hint from the code's record."""

from __future__ import annotations

from typing import Any

from r9700ctl.agent import codes
from r9700ctl.agent.result import ERROR, FAIL, PASS, WARN, CheckResult


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
    """A verdict whose hint is what was found (`said`, with the figures) and the code's next step
    (agent/codes.hint, the one place a hint is put together).

    Every verdict that is not PASS names a code of data/codes.yaml (KeyError for an unknown one).
    """
    if status != PASS and not code:
        raise ValueError(f"{check} {subject}: a {status} verdict needs a reason code")
    return CheckResult(
        id=check,
        subject=subject,
        status=status,
        metric=metric,
        value=value,
        unit=unit,
        threshold=threshold,
        hint=codes.hint(code, said) if code else said,
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
    if fraction < fail:
        return verdict(check, subject, FAIL, code=code, said=said, threshold=threshold, **common)
    if fraction < warn:
        return verdict(check, subject, WARN, code=code, said=said, threshold=threshold, **common)
    return verdict(check, subject, PASS, said=said, threshold=threshold, **common)


def no_output(check: str, node: str, error: str, timed_out: bool) -> CheckResult:
    """A node whose phase program left no result: stopped by the phase's wall clock (the role's
    `timeout` fired: CLUSTER_PHASE_TIMEOUT), or not reached / wrote nothing (CLUSTER_UNREACHABLE).
    ERROR either way: the node's part of the phase could not run to its end."""
    code = "CLUSTER_PHASE_TIMEOUT" if timed_out else "CLUSTER_UNREACHABLE"
    return verdict(check, node, ERROR, code=code, said=error or "the phase program wrote nothing")


def stopped(torchrun: dict[str, Any]) -> str:
    """What the agent did with a torchrun step its deadline stopped (agent/cluster/launch.py)."""
    deadline = torchrun.get("deadline_s")
    if torchrun.get("not_started"):
        return f"not started: {deadline} s were left of the phase's wall clock for it"
    return (
        f"stopped at its deadline of {deadline} s (its share of the phase's wall clock); "
        f"{torchrun.get('killed', 'its')} process(es) of the step killed by pid"
    )
