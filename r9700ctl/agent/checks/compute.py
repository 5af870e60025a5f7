"""C7 compute throughput and clock health under load: GEMM on all GPUs at once, sampled.

Per GPU and dtype: TFLOPS against the node median (FAIL < 0.85, WARN < 0.92) and the output
verified. While the load runs, clocks, temperatures, power and throttle reasons are sampled
every 0.5 s; from them:
- compute.throttle: thermal / hardware-slowdown / PROCHOT bits in > 5% of samples or in 3
  consecutive ones FAIL (THERMAL_THROTTLE); one isolated sample never does. Power-cap bits alone
  PASS with a note: a healthy card under GEMM sits at its power cap (FACTS.md: an H200 at
  700 W, 1455-1500 MHz, reason 0x4). Radeon TEMP_HOTSPOT without a hot reading is ignored
  (always set on RDNA3/RDNA4 firmware, ROCm/rocm-systems#11781).
- compute.power_cap: a cap below the board default WARNs (POWER_CAP_LOWERED).
- compute.temperature: hotspot (AMD junction) WARN >= 95 C, FAIL >= 105 C.
- compute.link_under_load: the PCIe link read during the load against its maximum (idle links
  downtrain, so only this reading can FAIL a link; rule shared with the pcie check).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from r9700ctl.agent.checks import _measure, register
from r9700ctl.agent.checks.pcie import link_result
from r9700ctl.agent.context import AgentContext
from r9700ctl.agent.judge import judge_against_peers, judge_floor, judge_samples
from r9700ctl.agent.result import FAIL, PASS, SKIP, WARN, CheckResult

DEFAULTS: dict[str, dict[str, Any]] = {
    # quick: bf16 only, 10 s (validation.md L1 "short"); standard: the three dtypes, 20 s each.
    "quick": {"compute.dtypes": "bf16", "compute.seconds": 10.0, "compute.n": 8192},
    "standard": {"compute.dtypes": "bf16,fp16,fp32", "compute.seconds": 20.0, "compute.n": 8192},
    "burnin": {"compute.dtypes": "bf16,fp16,fp32", "compute.seconds": 120.0, "compute.n": 8192},
}
FAILING_GROUPS = ("thermal", "hw_slowdown", "prochot")
THROTTLE_HINT = (
    "THERMAL_THROTTLE: {groups} limits ({reasons}) in {hits}/{n} samples: check airflow, fan curve, slot "
    "spacing and the card's position in the chassis; compare hotspot temperatures across GPUs"
)
POWER_NOTE = "power cap limited clocks in {frac:.0%} of samples (expected under GEMM load, not a fault)"
POWER_CAP_HINT = (
    "POWER_CAP_LOWERED: power cap {cap:.0f} W is below the board default {default:.0f} W: someone lowered it "
    "(amd-smi set / nvidia-smi -pl) or the PSU/12V-2x6 connector is limited; restore the default"
)
PEER_HINT = (
    "{reason}: this GPU computes slower than its siblings under the same load; compare clocks and power"
)


@register(id="compute", family="compute", levels={"quick", "standard", "burnin"}, needs_gpu=True, order=60)
def run(ctx: AgentContext) -> list[CheckResult]:
    dtypes = [d.strip() for d in str(_measure.param(ctx, "compute.dtypes", DEFAULTS)).split(",") if d.strip()]
    seconds = float(_measure.param(ctx, "compute.seconds", DEFAULTS))
    n = int(_measure.param(ctx, "compute.n", DEFAULTS))
    indices = ctx.gpu_indices
    pcis = {g.index: g.pci_address or None for g in ctx.gpus}
    links = {g.index: g.link.at or g.pci_address or None for g in ctx.gpus}
    hot = float(ctx.threshold("compute.hotspot_warn_c", 95.0))
    expected = len(dtypes) * (seconds + 10) + 20
    outcome = ctx.run_step(
        "compute.gemm",
        indices,
        _measure.call_kernel,
        "gemm",
        "gemm_under_load",
        indices,
        dtypes,
        n,
        seconds,
        3,
        0.5,
        pcis,
        str(ctx.root),
        hot,
        "cuda",
        links,
        timeout_s=_measure.timeout(ctx, expected),
    )
    if not outcome.ok:
        return [ctx.outcome_result("compute.tflops", "node", outcome)]
    value = outcome.value
    results = _tflops(ctx, value, dtypes)
    samples_by_gpu: dict[int, list[dict]] = {i: [] for i in indices}
    for sample in value["samples"]:
        samples_by_gpu.setdefault(sample["gpu"], []).append(sample)
    for gpu in ctx.gpus:
        telemetry = value["gpus"][str(gpu.index)]["telemetry"]
        mine = samples_by_gpu.get(gpu.index, [])
        results.append(_throttle(ctx, gpu.index, mine, telemetry, value["sampler"]))
        results.extend(_power_cap(gpu.index, telemetry))
        results.extend(_temperature(ctx, gpu.index, telemetry))
        results.extend(_link(ctx, gpu, telemetry))
    return results


def _tflops(ctx: AgentContext, value: dict, dtypes: list[str]) -> list[CheckResult]:
    results = []
    for dtype in dtypes:
        figures = {f"gpu{i}": entry[dtype]["tflops"] for i, entry in value["gpus"].items()}
        peers = judge_against_peers(
            figures,
            ctx.threshold("compute.peer_warn_fraction", 0.92),
            ctx.threshold("compute.peer_fail_fraction", 0.85),
        )
        for i, entry in value["gpus"].items():
            fig = entry[dtype]
            verdict = peers[f"gpu{i}"]
            status, hint = (
                verdict.status,
                PEER_HINT.format(reason=verdict.reason) if verdict.status != PASS else "",
            )
            if not fig["verified"]:
                status, hint = (
                    FAIL,
                    "GEMM result wrong beyond the dtype's rounding: isolate the GPU (compute fault)",
                )
            results.append(
                CheckResult(
                    id=f"compute.tflops_{dtype}",
                    subject=f"gpu{i}",
                    status=status,
                    metric=f"gemm_{dtype}_tflops",
                    value=round(fig["tflops"], 1),
                    unit="TFLOPS",
                    threshold=verdict.threshold,
                    hint=hint if status != PASS else (verdict.reason if not verdict.applied else ""),
                    evidence={
                        "windows_tflops": fig["windows_tflops"],
                        "verify": fig["verify"],
                        "n": value["n"],
                        "seconds": value["seconds_per_dtype"],
                        "all_gpus_at_once": len(value["gpus"]),
                        "method": value["method"],
                        "versions": value["versions"],
                        "device": value["devices"].get(i),
                    },
                )
            )
    return results


def _throttle(ctx: AgentContext, index: int, samples: list[dict], telemetry: dict, info: dict) -> CheckResult:
    with_bits = [s for s in samples if "throttle_raw" in s]
    evidence = {
        "source": info["source"],
        "interval_s": info["interval_s"],
        "groups": telemetry.get("throttle_groups", {}),
        "sclk_mhz": telemetry.get("sclk_mhz"),
        "mclk_mhz": telemetry.get("mclk_mhz"),
        "power_w": telemetry.get("power_w"),
        "temp_c": telemetry.get("temp_c"),
        "hotspot_c": telemetry.get("hotspot_c"),
        "samples": samples[:240],  # 2 minutes at 0.5 s: enough to see a trend, bounded in size
        "sampler_errors": info["errors"],
    }
    threshold = "thermal/HW-slowdown/PROCHOT bits in <= 5% of samples and < 3 in a row"
    if not with_bits:
        why = "no telemetry source on this node (sysfs gpu_metrics, NVML or nvidia-smi)"
        if info["source"]:
            why = f"{info['source']} gave no throttle reasons"
        return CheckResult(
            "compute.throttle", f"gpu{index}", SKIP, "throttle_samples", 0, "", threshold, why, evidence
        )
    flags = [any(g in s.get("groups", []) for g in FAILING_GROUPS) for s in with_bits]
    verdict = judge_samples(
        flags,
        max_fraction=float(ctx.threshold("compute.throttle_max_fraction", 0.05)),
        max_consecutive=int(ctx.threshold("compute.throttle_max_consecutive", 3)),
    )
    groups = telemetry.get("throttle_groups", {})
    hint = ""
    if verdict.status in (FAIL, WARN):
        bad = [g for g in FAILING_GROUPS if g in groups]
        reasons = sorted({r for g in bad for r in groups[g]["reasons"]})
        hint = THROTTLE_HINT.format(
            groups="/".join(bad), reasons=", ".join(reasons), hits=sum(flags), n=len(flags)
        )
        if verdict.status == WARN:
            hint = "isolated sample(s) only, not a FAIL: " + hint
    notes = []
    if "power" in groups:
        notes.append(POWER_NOTE.format(frac=groups["power"]["fraction"]))
    if "thermal_unconfirmed" in groups:
        notes.append("TEMP_HOTSPOT bit set without a hot reading: ignored (ROCm/rocm-systems#11781)")
    if verdict.status == PASS and notes:
        hint = "; ".join(notes)
    elif notes:
        hint += "; " + "; ".join(notes)
    return CheckResult(
        "compute.throttle",
        f"gpu{index}",
        verdict.status,
        "throttled_samples",
        sum(flags),
        "samples",
        f"{threshold} ({verdict.reason})",
        hint,
        evidence,
    )


def _power_cap(index: int, telemetry: dict) -> list[CheckResult]:
    cap, default = telemetry.get("power_cap_w"), telemetry.get("power_cap_default_w")
    if cap is None or default is None:
        return []
    lowered = cap < default * 0.99
    return [
        CheckResult(
            "compute.power_cap",
            f"gpu{index}",
            WARN if lowered else PASS,
            "power_cap",
            round(cap, 1),
            "W",
            f">= board default {default:.0f} W (WARN below)",
            POWER_CAP_HINT.format(cap=cap, default=default) if lowered else "",
            {"power_cap_w": cap, "power_cap_default_w": default, "power_w": telemetry.get("power_w")},
        )
    ]


def _temperature(ctx: AgentContext, index: int, telemetry: dict) -> list[CheckResult]:
    hotspot = (telemetry.get("hotspot_c") or {}).get("max")
    if hotspot is None:
        return []
    verdict = judge_floor(
        hotspot,
        ctx.threshold("compute.hotspot_warn_c", 95.0),
        ctx.threshold("compute.hotspot_fail_c", 105.0),
        unit="C",
        higher_is_better=False,
    )
    hint = "" if verdict.status == PASS else f"{verdict.reason}: airflow, fan curve or slot spacing"
    return [
        CheckResult(
            "compute.temperature",
            f"gpu{index}",
            verdict.status,
            "hotspot_max",
            hotspot,
            "C",
            verdict.threshold,
            hint,
            {"temperatures": {k: telemetry.get(k) for k in ("temp_c", "hotspot_c", "mem_temp_c")}},
        )
    ]


def _link(ctx: AgentContext, gpu: Any, telemetry: dict) -> list[CheckResult]:
    seen = telemetry.get("link_under_load")
    if not seen:
        return []
    link = dataclasses.replace(gpu.link, cur_speed_gts=seen["max_speed_gts"], cur_width=seen["max_width"])
    if link.max_speed_gts is None and link.max_width is None:
        return []
    result = link_result(ctx, gpu.index, link, under_load=True, check_id="compute.link_under_load")
    result.evidence["sampled"] = seen
    return [result]
