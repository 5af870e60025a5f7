"""C8 device memory bandwidth per GPU: BabelStream copy and triad, result verified.

Judged against the model's memory bandwidth (the manifest's memory_bandwidth_gbs, or
thresholds memory.spec_gbs for a card the manifest does not list): WARN below 0.75 x spec,
FAIL below 0.65 x spec (docs/validation.md C8), on the median of the timed windows (too few or too
noisy windows: INCONCLUSIVE); and each GPU against the node median. No spec and fewer than three
GPUs: INCONCLUSIVE, never PASS. The verified run is an extra untimed one (kernels/memory.py).
"""

from __future__ import annotations

from typing import Any

from r9700ctl.agent import codes
from r9700ctl.agent.checks import _measure, register
from r9700ctl.agent.context import AgentContext
from r9700ctl.agent.judge import coded, judge_against_peers
from r9700ctl.agent.kernels.specs import MemorySpec
from r9700ctl.agent.levels import from_level
from r9700ctl.agent.result import FAIL, PASS, WARN, WRONG_DATA, CheckResult

THRESHOLDS = (
    "memory.spec_gbs",
    "memory.spec_warn_fraction",
    "memory.spec_fail_fraction",
    "memory.peer_warn_fraction",
    "memory.peer_fail_fraction",
    *_measure.JUDGING,
)

DEFAULTS: dict[str, dict[str, Any]] = {
    # 1 GiB arrays: far above any cache (64 MiB Infinity Cache on the R9700, 60 MB L2 on an H200).
    "quick": {"memory.array_mib": 1024, "memory.windows": 3, "memory.calls_per_window": 20},
    "standard": {"memory.array_mib": 1024, "memory.windows": 5, "memory.calls_per_window": 20},
}
BELOW_SPEC = "MEMORY_BELOW_SPEC"
BELOW_PEERS = "MEMORY_BELOW_PEERS"
CORRUPTION = "MEMORY_CORRUPTION"


@register(id="memory", levels=from_level("quick"), order=50, thresholds=THRESHOLDS)
def run(ctx: AgentContext) -> list[CheckResult]:
    array = int(_measure.param(ctx, "memory.array_mib", DEFAULTS)) * _measure.MiB
    windows = int(_measure.param(ctx, "memory.windows", DEFAULTS))
    calls = int(_measure.param(ctx, "memory.calls_per_window", DEFAULTS))
    spec = ctx.model_spec.get("memory_bandwidth_gbs") or ctx.threshold("memory.spec_gbs")
    spec_source = (
        "manifest memory_bandwidth_gbs"
        if ctx.model_spec.get("memory_bandwidth_gbs")
        else ctx.threshold_text("memory.spec_gbs")
    )
    # 2 kernels x (warm-up + windows x calls) x 3 arrays at >= 100 GB/s, plus start-up.
    expected = 2 * (3 + windows * calls) * 3 * array / 100e9 + 15
    figures: dict[int, dict[str, Any]] = {}
    results: list[CheckResult] = []
    for gpu in ctx.gpus:
        outcome = _measure.run_kernel(
            ctx,
            f"memory.gpu{gpu.index}",
            [gpu.index],
            "memory.memory_bandwidth",
            MemorySpec(gpu=gpu.index, array_bytes=array, windows=windows, calls_per_window=calls),
            expected_s=expected,
        )
        if outcome.ok:
            figures[gpu.index] = outcome.value
        else:
            results.append(ctx.outcome_result("memory.copy", gpu.subject, outcome))
    for kernel in ("copy", "triad"):
        peers = judge_against_peers(
            {f"gpu{i}": f[f"{kernel}_gbs"] for i, f in figures.items()},
            float(ctx.threshold("memory.peer_warn_fraction")),
            float(ctx.threshold("memory.peer_fail_fraction")),
            min_peers=_measure.min_peers(ctx),
        )
        for i, fig in figures.items():
            value = fig[f"{kernel}_gbs"]
            if spec:
                warn = float(ctx.threshold("memory.spec_warn_fraction")) * spec
                fail = float(ctx.threshold("memory.spec_fail_fraction")) * spec
                floor = _measure.measured(ctx, fig[f"{kernel}_windows_gbs"], warn, fail, unit="GB/s")
            else:
                floor = ctx.unjudged("memory.spec_gbs", "no memory bandwidth spec for this model")
            floor, peer = coded(floor, BELOW_SPEC), coded(peers[f"gpu{i}"], BELOW_PEERS)
            status, threshold, why, code = _measure.combine(floor, peer)
            hints = []
            if floor.applied and floor.status in (WARN, FAIL):
                said = f"memory bandwidth {value:.0f} GB/s is {value / spec:.0%} of the {spec:.0f} GB/s spec"
                hints.append(codes.hint(BELOW_SPEC, said))
            elif floor.status != PASS and why:
                hints.append(why)
            if peer.applied and peer.status != PASS:
                hints.append(f"{peer.reason}: slower than its siblings")
            if not fig["verify"][kernel]["ok"]:
                status, code = FAIL, CORRUPTION
                hints.append(codes.hint(CORRUPTION, "memory kernel produced wrong results"))
            results.append(
                CheckResult(
                    id=f"memory.{kernel}",
                    subject=f"gpu{i}",
                    status=status,
                    metric=f"{kernel}_bandwidth",
                    value=_measure.rounded(value, 1),
                    unit="GB/s",
                    threshold=threshold,
                    hint="; ".join(hints),
                    evidence={
                        "windows_gbs": [round(v, 1) for v in fig[f"{kernel}_windows_gbs"]],
                        "spec_gbs": spec,
                        "spec_source": spec_source if spec else None,
                        "fraction_of_spec": round(value / spec, 3) if spec else None,
                        "verify": fig["verify"][kernel],
                        WRONG_DATA: not fig["verify"][kernel]["ok"],
                        "array_bytes": fig["array_bytes"],
                        "bytes_counted": fig["bytes_counted"],
                        "windows": fig["windows"],
                        "calls_per_window": fig["calls_per_window"],
                        "method": fig["method"],
                        "versions": fig["versions"],
                    },
                    code=code,
                )
            )
    return results
