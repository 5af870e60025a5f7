"""Burn-in: rounds of the GPU checks until --duration, merged so a mid-run FAIL is never lost.

The bugs pinned: reporting only the last round (a FAIL in round 3 of 10 vanished) and missing
a slow thermal drift that each round alone passes.
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path

from r9700ctl.agent import check_run, levels
from r9700ctl.agent.burnin import merge_rounds
from r9700ctl.agent.checks import CheckSpec
from r9700ctl.agent.context import AgentContext
from r9700ctl.agent.result import FAIL, PASS, WARN, CheckResult
from r9700ctl.agent.thresholds import resolve


def bw(value: float, status: str = PASS, subject: str = "gpu0") -> CheckResult:
    return CheckResult(
        id="hostbw.h2d",
        subject=subject,
        status=status,
        metric="h2d_bandwidth",
        value=value,
        unit="GB/s",
        threshold=">= 45 GB/s",
        code="HOSTBW_BELOW_FLOOR",
    )


def test_the_worst_round_is_kept_with_every_round_in_evidence():
    rounds = [[bw(54.0)], [bw(38.0, FAIL)], [bw(54.5)]]
    merged = merge_rounds(rounds, 0.05, 0.10)
    main = next(r for r in merged if r.id == "hostbw.h2d")
    assert (main.status, main.value) == (FAIL, 38.0)
    assert [r["status"] for r in main.evidence["rounds"]] == [PASS, FAIL, PASS]
    assert main.evidence["rounds_run"] == 3


def test_a_steady_slowdown_across_rounds_is_a_drift_failure():
    """Each round passes its floor, but the card lost 12 % from the first round to the last."""
    rounds = [[bw(v)] for v in (55.0, 53.0, 51.0, 49.5, 48.4)]
    drift = next(r for r in merge_rounds(rounds, 0.05, 0.10) if r.id == "burnin.drift")
    assert drift.subject == "gpu0:hostbw.h2d"
    assert drift.status == FAIL
    assert drift.value == round(48.4 / 55.0, 4)
    assert "from 55 to 48.4 GB/s over 5 rounds" in drift.hint


def test_a_rising_latency_is_drift_and_a_steady_one_is_not():
    def latency(value: float) -> CheckResult:
        return CheckResult(
            id="stability.latency", subject="node", status=PASS, metric="p99", value=value, unit="ms"
        )

    rising = next(
        r for r in merge_rounds([[latency(10.0)], [latency(10.7)]], 0.05, 0.10) if r.id == "burnin.drift"
    )
    assert rising.status == WARN
    steady = next(
        r for r in merge_rounds([[latency(10.0)], [latency(10.1)]], 0.05, 0.10) if r.id == "burnin.drift"
    )
    assert steady.status == PASS


def test_figures_without_a_known_direction_get_no_drift_result():
    rounds = [
        [CheckResult(id="x.count", subject="node", status=PASS, value=3, unit="lines")] for _ in range(3)
    ]
    assert [r.id for r in merge_rounds(rounds, 0.05, 0.10)] == ["x.count"]


def test_burn_in_repeats_the_gpu_checks_until_the_duration_has_passed():
    counter = itertools.count(1)

    def check(ctx: AgentContext) -> list[CheckResult]:
        time.sleep(0.05)
        return [bw(50.0 + next(counter) * 0.01)]

    spec = CheckSpec("fake", "hostbw", frozenset({"burnin"}), True, 40, False, check)
    params = levels.params_for("burnin", duration_s=0.3)
    ctx = AgentContext("burnin", [], resolve([], []), params, root=Path("/"))
    started = time.monotonic()
    merged = check_run._burn_in([spec], ctx, params, lambda text: None)
    elapsed = time.monotonic() - started
    main = next(r for r in merged if r.id == "hostbw.h2d")
    assert main.evidence["rounds_run"] >= 3
    assert 0.3 <= elapsed < 5
    assert any(r.id == "burnin.drift" for r in merged)
