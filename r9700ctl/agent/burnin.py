"""Burn-in: the measurement checks repeated in rounds for --duration, then judged as a whole.

A round runs every GPU check of the level once. Across rounds, each (check, subject) keeps its
worst verdict (a FAIL in round 7 of 12 is a FAIL), the per-round figures go into evidence, and
a `burnin.drift` result compares the last round with the first: a card that slows down as it
heats up (thermal soak) shows there. docs/validation.md C11: drift WARN > 5 %, FAIL > 10 %.
"""

from __future__ import annotations

import math
from typing import Any

from r9700ctl.agent import codes, stats
from r9700ctl.agent.result import FAIL, PASS, SEVERITY, WARN, CheckResult

# Units where a larger figure is better (bandwidth, throughput, speed-up) or worse (time, heat).
HIGHER_IS_BETTER = ("GB/s", "GiB/s", "TFLOPS", "TFLOP/s", "x")
LOWER_IS_BETTER = ("ms", "us", "µs", "s", "C", "°C")


def _numeric(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return None if math.isnan(value) else float(value)


def merge_rounds(rounds: list[list[CheckResult]], warn_drop: float, fail_drop: float) -> list[CheckResult]:
    """One result per (check, subject): the worst round, with every round in evidence; plus drift results."""
    order: list[tuple[str, str]] = []
    seen: dict[tuple[str, str], list[CheckResult]] = {}
    for round_results in rounds:
        for result in round_results:
            key = (result.id, result.subject)
            if key not in seen:
                order.append(key)
                seen[key] = []
            seen[key].append(result)
    merged: list[CheckResult] = []
    drifts: list[CheckResult] = []
    for key in order:
        series = seen[key]
        worst = max(reversed(series), key=lambda r: SEVERITY[r.status])
        worst.evidence = {
            **worst.evidence,
            "rounds": [{"status": r.status, "value": r.value} for r in series],
            "rounds_run": len(series),
        }
        merged.append(worst)
        drift = _drift_result(series, warn_drop, fail_drop)
        if drift is not None:
            drifts.append(drift)
    return merged + drifts


def _drift_result(series: list[CheckResult], warn_drop: float, fail_drop: float) -> CheckResult | None:
    values = [_numeric(r.value) for r in series]
    figures = [v for v in values if v is not None]
    unit = series[-1].unit
    if len(figures) < 2 or unit not in HIGHER_IS_BETTER + LOWER_IS_BETTER:
        return None
    ratio = stats.drift(figures, 0.1)
    if math.isnan(ratio):
        return None
    higher = unit in HIGHER_IS_BETTER
    loss = (1.0 - ratio) if higher else (ratio - 1.0)
    status = FAIL if loss > fail_drop else WARN if loss > warn_drop else PASS
    direction = "drop" if higher else "rise"
    hint = ""
    if status != PASS:
        said = (
            f"{series[0].id} on {series[0].subject} went from {figures[0]:.3g} to {figures[-1]:.3g} {unit} "
            f"over {len(figures)} rounds"
        )
        hint = codes.hint("BURNIN_DRIFT", said)
    return CheckResult(
        id="burnin.drift",
        subject=f"{series[0].subject}:{series[0].id}",
        status=status,
        metric=f"{series[0].metric or series[0].id} last/first",
        value=round(ratio, 4),
        unit="x",
        threshold=f"{direction} <= {warn_drop:.0%} (WARN), <= {fail_drop:.0%} (FAIL)",
        hint=hint,
        evidence={"values": figures, "unit": unit},
        code="BURNIN_DRIFT",
    )
