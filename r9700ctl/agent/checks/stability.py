"""C11 latency stability: p50/p95/p99 of the tensor-parallel step on all GPUs, 1000 x 3.

The medians of three repeats of 1000 iterations are judged (docs/validation.md C11's
protocol): tail ratio p99/p50 WARN > 1.5, FAIL > 3; drift (median of the last 10% over the first
10%) WARN > 1.05, FAIL > 1.10 (a thermal soak). Runs on one GPU too (world size 1).
"""

from __future__ import annotations

from typing import Any

from r9700ctl.agent import codes
from r9700ctl.agent.checks import _measure, register
from r9700ctl.agent.context import AgentContext
from r9700ctl.agent.judge import coded, judge_floor, judge_repeats
from r9700ctl.agent.kernels.specs import StepSpec
from r9700ctl.agent.levels import from_level
from r9700ctl.agent.result import INCONCLUSIVE, CheckResult

THRESHOLDS = (
    "stability.tail_warn",
    "stability.tail_fail",
    "stability.drift_warn",
    "stability.drift_fail",
    "judging.min_repeats",
)

DEFAULTS: dict[str, dict[str, Any]] = {
    # Fewer tokens than scaling: a latency-bound step, where jitter shows (decode-like).
    "standard": {"stability.iterations": 1000, "stability.repeats": 3, "stability.tokens": 512},
}
# Untimed load before the first repeat: an H200 measured here drifted 14% within the first
# repeat (boost clock falling to its power-cap clock) and < 2% once warm (docs/benchmarks.md).
WARMUP_S = 5.0
TAIL = "LATENCY_TAIL"
DRIFT = "LATENCY_DRIFT"


@register(id="stability", levels=from_level("standard"), order=90, thresholds=THRESHOLDS)
def run(ctx: AgentContext) -> list[CheckResult]:
    spec = StepSpec(
        tokens=int(_measure.param(ctx, "stability.tokens", DEFAULTS)),
        iterations=int(_measure.param(ctx, "stability.iterations", DEFAULTS)),
        repeats=int(_measure.param(ctx, "stability.repeats", DEFAULTS)),
        warmup=10,
        warmup_s=WARMUP_S,
        workload="tp",
    )
    n = len(ctx.gpus)
    # A 512-token step: ~10 ms on one R9700, less per GPU on more.
    expected = spec.repeats * (spec.iterations + 10) * 0.012 * spec.tokens / 512 + 30
    outcome = ctx.run_ranks(
        "stability.tp",
        n,
        _measure.call_rank_kernel,
        "stability",
        "latency_rank",
        spec,
        timeout_s=_measure.timeout(ctx, expected),
    )
    if not outcome.ok:
        return [ctx.outcome_result("stability.latency", "node", outcome)]
    value = outcome.value
    med = value["median"]
    tail = judge_floor(
        med["tail_ratio"],
        ctx.threshold("stability.tail_warn"),
        ctx.threshold("stability.tail_fail"),
        higher_is_better=False,
    )
    drift = judge_floor(
        med["drift"],
        ctx.threshold("stability.drift_warn"),
        ctx.threshold("stability.drift_fail"),
        higher_is_better=False,
    )
    tail, drift = coded(tail, TAIL), coded(drift, DRIFT)
    status, _, _, code = _measure.combine(tail, drift)
    hints = []
    too_few = judge_repeats(
        [r["p50_ms"] for r in value["repeats"]], int(ctx.threshold("judging.min_repeats"))
    )
    if too_few is not None:
        status, code = INCONCLUSIVE, too_few.code
        hints.append(f"{too_few.reason}: too few repeats to judge the tail and drift")
    if tail.status != "PASS":
        hints.append(
            codes.hint(
                TAIL, f"p99/p50 = {med['tail_ratio']:.2f}: some steps take much longer than the typical one"
            )
        )
    if drift.status != "PASS":
        hints.append(
            codes.hint(DRIFT, f"steps got {med['drift'] - 1:.0%} slower from the first to the last 10%")
        )
    return [
        CheckResult(
            id="stability.latency",
            subject="node",
            status=status,
            metric="p99_over_p50",
            value=round(med["tail_ratio"], 3),
            unit="ratio",
            threshold=f"p99/p50 {tail.threshold}; drift {drift.threshold}",
            hint="; ".join(hints),
            evidence={
                "gpus": n,
                "p50_ms": round(med["p50_ms"], 4),
                "p95_ms": round(med["p95_ms"], 4),
                "p99_ms": round(med["p99_ms"], 4),
                "cv": round(med["cv"], 4),
                "drift": round(med["drift"], 4),
                "repeats": value["repeats"],
                "all_ranks_p99_ms": [round(v["median"]["p99_ms"], 4) for v in outcome.values],
                "shape": value.get("shape"),
                "warmup": value["warmup"],
                "versions": value["versions"],
            },
            code=code,
        )
    ]
