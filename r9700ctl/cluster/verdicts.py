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
    figure: float,
    reference: float,
    limits: tuple[float, float],
    *,
    code: str,
    said: str,
    of: str,
    fraction_key: str,
    **common: Any,
) -> CheckResult:
    """`figure` as a fraction of the `reference` it should reach (`of` says what that is, e.g. "the
    1.25 GB/s line rate"): FAIL below limits[1], WARN below limits[0], else PASS. The fraction goes
    into the evidence under `fraction_key`; `said` is what was measured, the fraction is added."""
    warn, fail = limits
    fraction = figure / reference
    common.setdefault("evidence", {})[fraction_key] = round(fraction, 3)
    threshold = f">= {warn:g} x {of} (FAIL below {fail:g} x)"
    common.update(said=f"{said} = {fraction:.2f} x {of}", threshold=threshold)
    if fraction < fail:
        return verdict(check, subject, FAIL, code=code, **common)
    if fraction < warn:
        return verdict(check, subject, WARN, code=code, **common)
    return verdict(check, subject, PASS, **common)


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
