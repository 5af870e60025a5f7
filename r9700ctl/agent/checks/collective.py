"""C6 all-reduce bus bandwidth, one process per GPU through torch.distributed (RCCL on ROCm).

busbw = algbw x 2(n-1)/n (nccl-tests doc/PERFORMANCE.md). quick: 256 MiB with P2P on;
standard: a sweep 1 MiB..1 GiB, with P2P on and again with NCCL_P2P_DISABLE=1 (RCCL reads
NCCL_* too: https://rocm.docs.amd.com/projects/rccl/en/latest/api-reference/env-variables.html).
On AMD the P2P-on run also sets HSA_FORCE_FINE_GRAIN_PCIE=1, as r9700ctl's environment list does with
P2P on: it is no P2P switch but makes ROCr expose VRAM as a fine-grained pool over PCIe (ROCR-Runtime
amd_gpu_agent.cpp), and RCCL warns at start-up while it is unset (ROCm/rccl src/init.cc, rccl#1026).
- any wrong element (checked against the analytic sum): FAIL;
- busbw at the largest size against the floor for n GPUs (thresholds collective.busbw_warn_gbs_n*:
  4 GPUs 20, 8 GPUs 15 GB/s, from 8x RTX 5090 Gen5 at 28/35, NVIDIA/nccl#1639); below
  0.5 GB/s nothing was measured: INCONCLUSIVE;
- gain = busbw(P2P on) / busbw(P2P off): reported only (SKIP), below collective.p2p_gain_note_below
  with the note that P2P brings nothing here and NCCL_P2P_DISABLE=1 is the safer setting
  (ROCm/rocm-systems#11348).
"""

from __future__ import annotations

from typing import Any

from r9700ctl.agent import codes
from r9700ctl.agent.checks import _measure, register
from r9700ctl.agent.context import AgentContext
from r9700ctl.agent.judge import code_for
from r9700ctl.agent.kernels.specs import AllReduceSpec
from r9700ctl.agent.levels import from_level
from r9700ctl.agent.result import FAIL, INCONCLUSIVE, PASS, SKIP, WRONG_DATA, CheckResult

THRESHOLDS = (
    "collective.busbw_warn_gbs_n2",
    "collective.busbw_warn_gbs_n4",
    "collective.busbw_warn_gbs_n8",
    "collective.inconclusive_below_gbs",
    "collective.p2p_gain_note_below",
    *_measure.JUDGING,
)

DEFAULTS: dict[str, dict[str, Any]] = {
    "quick": {"collective.sizes_mib": "256", "collective.windows": 3, "collective.p2p_off": False},
    "standard": {
        "collective.sizes_mib": "1,4,16,64,256,1024",
        "collective.windows": 5,
        "collective.p2p_off": True,
    },
}
WRONG = "ALLREDUCE_WRONG_DATA"
LOW = "ALLREDUCE_BELOW_FLOOR"
NOTHING = "ALLREDUCE_NOTHING_MEASURED"
NO_GAIN = "P2P_NO_GAIN"


def _floor_for(ctx: AgentContext, n: int) -> float | None:
    """The busbw WARN floor of the largest configured n <= the GPU count."""
    best = None
    for k in (2, 4, 8):
        value = ctx.threshold(f"collective.busbw_warn_gbs_n{k}")
        if k <= n and value is not None:
            best = float(value)
    return best


def p2p_on_env(ctx: AgentContext) -> dict[str, str]:
    return {"HSA_FORCE_FINE_GRAIN_PCIE": "1"} if any(g.vendor == "1002" for g in ctx.gpus) else {}


@register(id="collective", levels=from_level("quick"), order=70, thresholds=THRESHOLDS)
def run(ctx: AgentContext) -> list[CheckResult]:
    skip = _measure.skip_single_gpu(ctx, "collective.allreduce")
    if skip:
        return skip
    n = len(ctx.gpus)
    sizes = [
        int(s) * _measure.MiB for s in str(_measure.param(ctx, "collective.sizes_mib", DEFAULTS)).split(",")
    ]
    windows = int(_measure.param(ctx, "collective.windows", DEFAULTS))
    modes = {"p2p_on": p2p_on_env(ctx)}
    if _measure.param(ctx, "collective.p2p_off", DEFAULTS):
        modes["p2p_off"] = {"NCCL_P2P_DISABLE": "1"}
    # Per size: check + warm-up + windows x up to 20 calls at >= 2 GB/s algbw, plus start-up.
    expected = sum((6 + windows * 20) * s / 2e9 for s in sizes) + 30
    results: list[CheckResult] = []
    busbw: dict[str, float] = {}
    for mode, env in modes.items():
        outcome = ctx.run_ranks(
            f"collective.allreduce.{mode}",
            n,
            _measure.call_rank_kernel,
            "collective",
            "allreduce_sweep",
            AllReduceSpec(sizes_bytes=tuple(sizes), dtype="bf16", windows=windows, warmup=5),
            timeout_s=_measure.timeout(ctx, expected),
            env=env,
        )
        if not outcome.ok:
            results.append(ctx.outcome_result("collective.allreduce", mode, outcome))
            continue
        result = _mode_result(ctx, n, mode, env, outcome.value)
        busbw[mode] = float(result.value or 0.0)
        results.append(result)
    if "p2p_on" in busbw and "p2p_off" in busbw and busbw["p2p_off"] > 0:
        results.append(_gain_result(ctx, busbw["p2p_on"], busbw["p2p_off"]))
    return results


def _mode_result(ctx: AgentContext, n: int, mode: str, env: dict, value: dict) -> CheckResult:
    largest = max(value["sizes"], key=lambda r: r["size_bytes"])
    floor = _floor_for(ctx, n)
    if floor is None:
        verdict = ctx.unjudged("collective.busbw_warn_gbs_n2", f"no busbw floor for {n} GPUs")
    else:
        verdict = _measure.measured(ctx, largest.get("windows_busbw_gbs") or [], floor, None, unit="GB/s")
    status, code = verdict.status, code_for(verdict, LOW)
    low = verdict.applied and verdict.status != PASS
    hint = codes.hint(LOW, f"bus bandwidth below the floor for {n} GPUs") if low else verdict.reason
    minimum = float(ctx.threshold("collective.inconclusive_below_gbs"))
    if largest["busbw_gbs"] < minimum:
        status, code = INCONCLUSIVE, NOTHING
        hint = f"busbw {largest['busbw_gbs']:.2f} GB/s < {minimum} GB/s: nothing measured"
    if value["wrong_total"]:
        status, code = FAIL, WRONG
        hint = codes.hint(WRONG, f"all-reduce returned wrong values ({value['wrong_total']} elements)")
    return CheckResult(
        id="collective.allreduce",
        subject=mode,
        status=status,
        metric=f"busbw_{largest['size_bytes'] >> 20}MiB",
        value=round(largest["busbw_gbs"], 2),
        unit="GB/s",
        threshold=f"{verdict.threshold}; #wrong == 0",
        hint=hint,
        evidence={
            "gpus": n,
            "env": env,
            "sizes": [
                {k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()}
                for row in value["sizes"]
            ],
            "wrong_total": value["wrong_total"],
            WRONG_DATA: bool(value["wrong_total"]),
            "dtype": value["dtype"],
            "bus_factor": value["bus_factor"],
            "formula": value["formula"],
            "windows": value["windows"],
            "warmup": value["warmup"],
            "versions": value["versions"],
        },
        code=code,
    )


def _gain_result(ctx: AgentContext, on: float, off: float) -> CheckResult:
    gain = on / off
    below = float(ctx.threshold("collective.p2p_gain_note_below"))
    return CheckResult(
        id="collective.p2p_gain",
        subject="node",
        status=SKIP,
        metric="busbw_p2p_on_over_off",
        value=round(gain, 3),
        unit="x",
        threshold=f"reported only (a note below {below:g})",
        hint=codes.hint(NO_GAIN, f"P2P brings no benefit on this platform (gain {gain:.2f}x)")
        if gain < below
        else "reported only: the benefit P2P brings here",
        evidence={"busbw_p2p_on_gbs": round(on, 2), "busbw_p2p_off_gbs": round(off, 2)},
        code=NO_GAIN if gain < below else "REPORTED_ONLY",
    )
