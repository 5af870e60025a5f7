"""C10 scaling 1 -> 2 -> 4 -> ... -> N GPUs of a LLaMA-3-70B-shaped tensor-parallel layer step.

Strong scaling of a fixed step (tokens per step: scaling.tokens), with P2P on and, in standard,
with NCCL_P2P_DISABLE=1: speedup T(1)/T(n), efficiency speedup/n, and the share of the step
spent in the all-reduces. Reported only (SKIP, never an unjudged PASS) by default (docs/validation.md
C10b), except:
- `--expect-scaling 4:3.4,8:6.1`: FAIL when the measured speedup < 0.9 x the expected one
  (scaling.expectation_margin), judged on the median of the repeats (too few: INCONCLUSIVE);
- comm share > 25% at n = 4: WARN ("PCIe-bound; check P2P and the all-reduce bandwidth").
"""

from __future__ import annotations

from typing import Any

from r9700ctl.agent import codes
from r9700ctl.agent.checks import _measure, register
from r9700ctl.agent.checks.collective import p2p_on_env
from r9700ctl.agent.context import AgentContext
from r9700ctl.agent.judge import judge_repeats
from r9700ctl.agent.kernels.figures import scaling_table, world_sizes
from r9700ctl.agent.kernels.specs import StepSpec
from r9700ctl.agent.levels import from_level
from r9700ctl.agent.result import FAIL, INCONCLUSIVE, PASS, SKIP, WARN, CheckResult

THRESHOLDS = ("scaling.expectation_margin", "scaling.comm_share_warn_n4", "judging.min_repeats")

DEFAULTS: dict[str, dict[str, Any]] = {
    "standard": {
        "scaling.tokens": 2048,
        "scaling.iterations": 30,
        "scaling.repeats": 3,
        "scaling.p2p_off": True,
    },
}
BELOW_EXPECTED = "SCALING_BELOW_EXPECTED"
COMM_BOUND = "SCALING_COMM_BOUND"


@register(id="scaling", levels=from_level("standard"), order=80, thresholds=THRESHOLDS)
def run(ctx: AgentContext) -> list[CheckResult]:
    skip = _measure.skip_single_gpu(ctx, "scaling.tp")
    if skip:
        return skip
    spec = StepSpec(
        tokens=int(_measure.param(ctx, "scaling.tokens", DEFAULTS)),
        iterations=int(_measure.param(ctx, "scaling.iterations", DEFAULTS)),
        repeats=int(_measure.param(ctx, "scaling.repeats", DEFAULTS)),
        warmup=5,
    )
    modes = {"p2p_on": p2p_on_env(ctx)}
    if _measure.param(ctx, "scaling.p2p_off", DEFAULTS):
        modes["p2p_off"] = {"NCCL_P2P_DISABLE": "1"}
    # A 2048-token step takes ~40 ms on one R9700 (3.5 TFLOP at ~90 TFLOPS): x iterations x repeats.
    expected = spec.repeats * (spec.iterations + 5) * spec.tokens / 2048 * 0.05 + 30
    results: list[CheckResult] = []
    tables: dict[str, list[dict]] = {}
    for mode, env in modes.items():
        step_ms: dict[int, float] = {}
        share: dict[int, float] = {}
        raw: dict[int, dict] = {}
        for n in world_sizes(len(ctx.gpus)):
            outcome = ctx.run_ranks(
                f"scaling.{mode}.n{n}",
                n,
                _measure.call_rank_kernel,
                "scaling",
                "tp_scaling_rank",
                spec,
                timeout_s=_measure.timeout(ctx, expected),
                env=env,
            )
            if not outcome.ok:
                results.append(ctx.outcome_result("scaling.tp", f"n={n} {mode}", outcome))
                continue
            step_ms[n], share[n], raw[n] = (
                outcome.value["step_ms"],
                outcome.value["comm_share"],
                outcome.value,
            )
        if 1 not in step_ms:
            continue
        tables[mode] = scaling_table(step_ms, share)
        results.extend(_rows(ctx, mode, tables[mode], raw))
    return results


def _rows(ctx: AgentContext, mode: str, table: list[dict], raw: dict[int, dict]) -> list[CheckResult]:
    margin = float(ctx.threshold("scaling.expectation_margin"))
    comm_limit = float(ctx.threshold("scaling.comm_share_warn_n4"))
    out = []
    for row in table:
        n = row["n"]
        if n == 1:
            continue
        status, hints, rules = SKIP, ["reported only: no --expect-scaling for this n"], ["reported only"]
        code = "REPORTED_ONLY"
        want = ctx.expect_scaling.get(n)
        value = raw[n]
        if want is not None and mode == "p2p_on":
            rules, hints = [f">= {margin:g} x expected {want:g}x (FAIL below)"], []
            too_few = judge_repeats(
                [r["step_ms"] for r in value["repeats"]], int(ctx.threshold("judging.min_repeats"))
            )
            if too_few is not None:
                status, code = INCONCLUSIVE, too_few.code
                hints.append(f"{too_few.reason}: too few repeats to hold the speedup to {want:g}x")
            elif row["speedup"] < margin * want:
                status, code = FAIL, BELOW_EXPECTED
                said = (
                    f"speedup {row['speedup']:.2f}x on {n} GPUs is below {margin:g} x the expected {want:g}x"
                )
                hints.append(codes.hint(BELOW_EXPECTED, said))
            else:
                status = PASS
        if n == 4:
            rules.append(f"comm share <= {comm_limit:.0%} at n=4 (WARN above)")
            if row.get("comm_share", 0) > comm_limit:
                if status in (PASS, SKIP):
                    status, code = WARN, COMM_BOUND
                hints = [h for h in hints if not h.startswith("reported only")]
                said = f"{row['comm_share']:.0%} of the step is communication at n=4"
                hints.append(codes.hint(COMM_BOUND, said))
            elif status == SKIP:
                status = PASS
                hints = []
        out.append(
            CheckResult(
                id="scaling.tp",
                subject=f"n={n} {mode}",
                status=status,
                metric="speedup",
                value=round(row["speedup"], 3),
                unit="x",
                threshold="; ".join(rules),
                hint="; ".join(hints),
                evidence={
                    "expected_speedup": want if mode == "p2p_on" else None,  # --expect-scaling
                    "efficiency": round(row["efficiency"], 3),
                    "step_ms": round(row["step_ms"], 3),
                    "comm_share": round(row.get("comm_share", 0.0), 4),
                    "table": [
                        {k: round(v, 4) if isinstance(v, float) else v for k, v in r.items()} for r in table
                    ],
                    "tokens_per_s": round(value["tokens_per_s"], 1),
                    "rank_tflops": round(value["rank_tflops"], 1),
                    "shape": value["shape"],
                    "iterations": value["iterations"],
                    "repeats": value["repeats"],
                    "versions": value["versions"],
                },
                code=code,
            )
        )
    return out
