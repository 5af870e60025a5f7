"""C7 compute throughput and clock health under load: GEMM on all GPUs at once, sampled.

Per GPU and dtype: TFLOPS against an absolute floor, a fraction of the model's datasheet dense
peak (thresholds compute.peak_tflops_<dtype> x floor_*_fraction_of_peak, so a node with one or
two GPUs is judged too), on the median of the timed windows; against the node median (FAIL <
0.85, WARN < 0.92, with three or more GPUs); and the output verified. A dtype without a peak
for the model is reported only (null in the model's section, e.g. R9700 fp32) or INCONCLUSIVE.
While the load runs, clocks, temperatures, power and throttle reasons are sampled every 0.5 s;
from them:
- compute.clock: the median shader clock against the model's boost clock: below
  clock_warn_fraction_of_boost with the power-cap reason set is a note (a card at its power cap
  runs below boost by design); with thermal/slowdown reasons it points at compute.throttle;
  with no reason at all it WARNs (CLOCKS_LOW: power delivery, a clock lock, a stuck DPM state).
- compute.throttle: thermal / hardware-slowdown / PROCHOT bits in > 5% of samples or in 3
  consecutive ones FAIL (THERMAL_THROTTLE); one isolated sample never does. Power-cap bits alone
  PASS with a note: a healthy card under GEMM sits at its power cap (docs/benchmarks.md: an H200 at
  700 W, 1455-1500 MHz, reason 0x4). Radeon TEMP_HOTSPOT without a hot reading is ignored
  (always set on RDNA3/RDNA4 firmware, ROCm/rocm-systems#11781).
- compute.power_cap: a cap below the board default WARNs (POWER_CAP_LOWERED), unless it is the cap
  r9700_power set (/etc/r9700ctl/power.json): then a cap other than that one WARNs (CAP_NOT_APPLIED).
- compute.temperature: hotspot (AMD junction) WARN >= 95 C, FAIL >= 105 C.
- compute.link_under_load: the PCIe link read during the load against its maximum (idle links
  downtrain, so only this reading can FAIL a link; rule shared with the pcie check).
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import Any

from r9700ctl.agent import codes
from r9700ctl.agent import power_budget as power
from r9700ctl.agent.checks import _measure, pcie, register
from r9700ctl.agent.checks import power as power_check
from r9700ctl.agent.checks.pcie import link_result
from r9700ctl.agent.context import AgentContext
from r9700ctl.agent.judge import Verdict, code_for, coded, judge_against_peers, judge_floor, judge_samples
from r9700ctl.agent.kernels.specs import GemmSpec
from r9700ctl.agent.levels import from_level
from r9700ctl.agent.result import FAIL, PASS, SKIP, WARN, WRONG_DATA, CheckResult

THRESHOLDS = (
    "compute.peer_warn_fraction",
    "compute.peer_fail_fraction",
    "compute.floor_warn_fraction_of_peak",
    "compute.floor_fail_fraction_of_peak",
    "compute.peak_tflops_bf16",
    "compute.peak_tflops_fp16",
    "compute.peak_tflops_fp32",
    "compute.boost_clock_mhz",
    "compute.clock_warn_fraction_of_boost",
    "compute.power_capped_min_fraction",
    "compute.throttle_max_fraction",
    "compute.throttle_max_consecutive",
    "compute.hotspot_warn_c",
    "compute.hotspot_fail_c",
    "compute.power_cap_min_fraction_of_default",
    *pcie.THRESHOLDS,
    *_measure.JUDGING,
)

DEFAULTS: dict[str, dict[str, Any]] = {
    # quick: bf16 only, 10 s (docs/validation.md L1 "short"); standard: the three dtypes, 20 s each.
    "quick": {"compute.dtypes": "bf16", "compute.seconds": 10.0, "compute.n": 8192},
    "standard": {"compute.dtypes": "bf16,fp16,fp32", "compute.seconds": 20.0, "compute.n": 8192},
    "burnin": {"compute.dtypes": "bf16,fp16,fp32", "compute.seconds": 120.0, "compute.n": 8192},
}
FAILING_GROUPS = ("thermal", "hw_slowdown", "prochot")
POWER_NOTE = "power cap limited clocks in {frac:.0%} of samples (expected under GEMM load, not a fault)"
THERMAL_THROTTLE = "THERMAL_THROTTLE"
POWER_CAP_LOWERED = "POWER_CAP_LOWERED"
BELOW_PEAK = "COMPUTE_BELOW_PEAK"
BELOW_PEERS = "COMPUTE_BELOW_PEERS"
WRONG_RESULT = "COMPUTE_WRONG_RESULT"
CLOCKS_LOW = "CLOCKS_LOW"
HOTSPOT = "HOTSPOT_HIGH"
CLOCK_POWER_NOTE = (
    "clocks at {ratio:.0%} of boost under load, power-capped (power-cap reason in {frac:.0%} of samples): "
    "expected at the power cap, not a fault"
)
CLOCK_THROTTLE_NOTE = (
    "clocks at {ratio:.0%} of boost under load, explained by {groups} limits: see compute.throttle"
)


@register(id="compute", levels=from_level("quick"), order=60, thresholds=THRESHOLDS)
def run(ctx: AgentContext) -> list[CheckResult]:
    dtypes = [d.strip() for d in str(_measure.param(ctx, "compute.dtypes", DEFAULTS)).split(",") if d.strip()]
    seconds = float(_measure.param(ctx, "compute.seconds", DEFAULTS))
    n = int(_measure.param(ctx, "compute.n", DEFAULTS))
    indices = ctx.gpu_indices
    pcis = {g.index: g.pci_address or None for g in ctx.gpus}
    links = {g.index: g.link.at or g.pci_address or None for g in ctx.gpus}
    spec = GemmSpec(
        gpus=tuple(indices),
        dtypes=tuple(dtypes),
        n=n,
        seconds_per_dtype=seconds,
        pci_addresses=pcis,
        link_addresses=links,
        root=str(ctx.root),
        hotspot_credible_c=float(ctx.threshold("compute.hotspot_warn_c")),
    )
    expected = len(dtypes) * (seconds + 10) + 20
    outcome = _measure.run_kernel(
        ctx, "compute.gemm", indices, "gemm.gemm_under_load", spec, expected_s=expected
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
        results.append(_clock(ctx, gpu.index, telemetry, value["sampler"]))
        results.extend(_power_cap(ctx, gpu.index, telemetry))
        results.extend(_temperature(ctx, gpu.index, telemetry))
        results.extend(_link(ctx, gpu, telemetry))
    return results


def _floor(ctx: AgentContext, dtype: str, windows: list[float]) -> tuple[Verdict, float | None]:
    """The absolute floor of one dtype: (verdict, the peak it derives from)."""
    key = f"compute.peak_tflops_{dtype}"
    peak = ctx.threshold(key)
    if peak is None:
        return ctx.unjudged(key, f"no dense {dtype} peak for this model"), None
    peak = float(peak)
    warn = float(ctx.threshold("compute.floor_warn_fraction_of_peak")) * peak
    fail = float(ctx.threshold("compute.floor_fail_fraction_of_peak")) * peak
    verdict = _measure.measured(ctx, windows, warn, fail, unit="TFLOPS")
    source = f"{peak:g} TFLOPS dense peak, {ctx.threshold_text(key)}"
    threshold = f"{verdict.threshold} [{source}]"
    return Verdict(verdict.status, threshold, verdict.reason, verdict.applied, verdict.code), peak


def _tflops(ctx: AgentContext, value: dict, dtypes: list[str]) -> list[CheckResult]:
    results = []
    for dtype in dtypes:
        figures = {f"gpu{i}": entry[dtype]["tflops"] for i, entry in value["gpus"].items()}
        peers = judge_against_peers(
            figures,
            float(ctx.threshold("compute.peer_warn_fraction")),
            float(ctx.threshold("compute.peer_fail_fraction")),
            min_peers=_measure.min_peers(ctx),
        )
        for i, entry in value["gpus"].items():
            fig = entry[dtype]
            floor, peak = _floor(ctx, dtype, fig["windows_tflops"])
            floor, peer = coded(floor, BELOW_PEAK), coded(peers[f"gpu{i}"], BELOW_PEERS)
            status, threshold, why, code = _measure.combine(floor, peer)
            hints = []
            if floor.applied and floor.status in (WARN, FAIL) and peak:
                source = ctx.threshold_text(f"compute.peak_tflops_{dtype}")
                said = (
                    f"{floor.reason}: {fig['tflops']:.0f} TFLOPS is {fig['tflops'] / peak:.0%} of the "
                    f"{peak:g} TFLOPS dense peak ({source})"
                )
                hints.append(codes.hint(BELOW_PEAK, said))
            elif floor.status != PASS and why:
                hints.append(why)
            if peer.applied and peer.status != PASS:
                hints.append(codes.hint(BELOW_PEERS, peer.reason))
            if not fig["verified"]:
                status, code = FAIL, WRONG_RESULT
                hints.insert(0, codes.hint(WRONG_RESULT, "GEMM result wrong beyond the dtype's rounding"))
            results.append(
                CheckResult(
                    id=f"compute.tflops_{dtype}",
                    subject=f"gpu{i}",
                    status=status,
                    metric=f"gemm_{dtype}_tflops",
                    value=round(fig["tflops"], 1),
                    unit="TFLOPS",
                    threshold=threshold,
                    hint="; ".join(hints),
                    evidence={
                        "windows_tflops": fig["windows_tflops"],
                        "verify": fig["verify"],
                        WRONG_DATA: not fig["verified"],
                        "peak_tflops": peak,
                        "fraction_of_peak": round(fig["tflops"] / peak, 3) if peak else None,
                        "n": value["n"],
                        "seconds": value["seconds_per_dtype"],
                        "all_gpus_at_once": len(value["gpus"]),
                        "method": value["method"],
                        "versions": value["versions"],
                        "device": value["devices"].get(i),
                    },
                    code=code,
                )
            )
    return results


def _clock(ctx: AgentContext, index: int, telemetry: dict, info: dict) -> CheckResult:
    """The median shader clock under load against the model's boost clock."""
    sclk = (telemetry.get("sclk_mhz") or {}).get("median")
    boost = ctx.threshold("compute.boost_clock_mhz")
    limit = float(ctx.threshold("compute.clock_warn_fraction_of_boost"))
    evidence = {
        "sclk_mhz": telemetry.get("sclk_mhz"),
        "boost_clock_mhz": boost,
        "boost_source": ctx.threshold_text("compute.boost_clock_mhz"),
        "throttle_groups": telemetry.get("throttle_groups", {}),
        "source": info["source"],
    }
    source = ctx.threshold_text("compute.boost_clock_mhz")
    threshold = (
        f">= {limit:g} x boost {float(boost):.0f} MHz unless power-capped ({source})"
        if boost
        else "no boost clock for this model"
    )
    result = partial(
        CheckResult,
        id="compute.clock",
        subject=f"gpu{index}",
        metric="sclk_median",
        unit="MHz",
        threshold=threshold,
        evidence=evidence,
    )
    if sclk is None:
        why = (
            f"{info['source']} gave no shader clock" if info["source"] else "no telemetry source on this node"
        )
        return result(status=SKIP, hint=why, code="TELEMETRY_MISSING")
    if not boost:
        verdict = ctx.unjudged("compute.boost_clock_mhz", "no boost clock for this model")
        return result(status=verdict.status, value=round(sclk), hint=verdict.reason, code=verdict.code)
    ratio = sclk / float(boost)
    evidence["fraction_of_boost"] = round(ratio, 3)
    groups = telemetry.get("throttle_groups", {})
    power = float((groups.get("power") or {}).get("fraction", 0.0))
    limiting = [g for g in (*FAILING_GROUPS, "current") if g in groups]
    status, hint = PASS, ""
    if ratio < limit:
        if power >= float(ctx.threshold("compute.power_capped_min_fraction")):
            hint = CLOCK_POWER_NOTE.format(ratio=ratio, frac=power)
        elif limiting:
            hint = CLOCK_THROTTLE_NOTE.format(ratio=ratio, groups="/".join(limiting))
        else:
            said = (
                f"the median shader clock under load, {sclk:.0f} MHz, is {ratio:.0%} of the "
                f"{float(boost):.0f} MHz boost clock with no throttle reason reported"
            )
            status, hint = WARN, codes.hint(CLOCKS_LOW, said)
    return result(status=status, value=round(sclk), hint=hint, code=CLOCKS_LOW)


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
    threshold = (
        f"thermal/HW-slowdown/PROCHOT bits in <= {float(ctx.threshold('compute.throttle_max_fraction')):.0%} "
        f"of samples and < {int(ctx.threshold('compute.throttle_max_consecutive'))} in a row"
    )
    if not with_bits:
        why = "no telemetry source on this node (sysfs gpu_metrics, NVML or nvidia-smi)"
        if info["source"]:
            why = f"{info['source']} gave no throttle reasons"
        return CheckResult(
            id="compute.throttle",
            subject=f"gpu{index}",
            status=SKIP,
            metric="throttle_samples",
            value=0,
            threshold=threshold,
            hint=why,
            evidence=evidence,
            code="TELEMETRY_MISSING",
        )
    flags = [any(g in s.get("groups", []) for g in FAILING_GROUPS) for s in with_bits]
    verdict = judge_samples(
        flags,
        max_fraction=float(ctx.threshold("compute.throttle_max_fraction")),
        max_consecutive=int(ctx.threshold("compute.throttle_max_consecutive")),
        min_samples=int(ctx.threshold("judging.min_samples")),
    )
    groups = telemetry.get("throttle_groups", {})
    hint = ""
    if verdict.status in (FAIL, WARN):
        bad = [g for g in FAILING_GROUPS if g in groups]
        reasons = sorted({r for g in bad for r in groups[g]["reasons"]})
        said = f"{'/'.join(bad)} limits ({', '.join(reasons)}) in {sum(flags)}/{len(flags)} samples"
        hint = codes.hint(THERMAL_THROTTLE, said)
        if verdict.status == WARN:
            hint = "isolated sample(s) only, not a FAIL: " + hint
    notes = []
    if "power" in groups:
        notes.append(POWER_NOTE.format(frac=groups["power"]["fraction"]))
    if "thermal_unconfirmed" in groups:
        note = "TEMP_HOTSPOT bit set without a hot reading: ignored"
        known = _measure.known_issue_hints(ctx, "compute.throttle", note)
        notes.append(f"{note} ({known[0]})" if known else f"{note} (ROCm/rocm-systems#11781)")
    if verdict.status == PASS and notes:
        hint = "; ".join(notes)
    elif notes:
        hint += "; " + "; ".join(notes)
    return CheckResult(
        id="compute.throttle",
        subject=f"gpu{index}",
        status=verdict.status,
        metric="throttled_samples",
        value=sum(flags),
        unit="samples",
        threshold=f"{threshold} ({verdict.reason})",
        hint=hint,
        evidence=evidence,
        code=code_for(verdict, THERMAL_THROTTLE),
    )


def _power_cap(ctx: AgentContext, index: int, telemetry: dict) -> list[CheckResult]:
    cap, default = telemetry.get("power_cap_w"), telemetry.get("power_cap_default_w")
    if cap is None or default is None:
        return []
    # A cap the node's own policy asks for (r9700_power, /etc/r9700ctl/power.json) is no fault:
    # it is held against that policy instead of the board default.
    policy, _ = power.load_policy(ctx.root)
    wanted = policy.caps_w.get(ctx.gpu(index).pci_address or "") if policy else None
    verdict = partial(
        CheckResult, id="compute.power_cap", subject=f"gpu{index}", metric="power_cap", value=round(cap, 1)
    )
    verdict = partial(verdict, unit="W")
    if wanted is not None:
        applied = abs(cap - wanted) <= 1.0
        said = f"r9700_power set {wanted:g} W for this card but {cap:g} W is in force"
        note = f"cap {cap:.0f} W set by r9700_power (board default {default:.0f} W)"
        return [
            verdict(
                status=PASS if applied else WARN,
                threshold=f"= {wanted:g} W set by r9700_power (WARN otherwise)",
                hint=note if applied else codes.hint(power_check.CAP_NOT_APPLIED, said),
                evidence={
                    "power_cap_w": cap,
                    "power_cap_default_w": default,
                    "cap_set_by_r9700_power_w": wanted,
                },
                code=power_check.CAP_NOT_APPLIED,
            )
        ]
    lowered = cap < default * float(ctx.threshold("compute.power_cap_min_fraction_of_default"))
    said = f"power cap {cap:.0f} W is below the board default {default:.0f} W"
    return [
        verdict(
            status=WARN if lowered else PASS,
            threshold=f">= board default {default:.0f} W (WARN below)",
            hint=codes.hint(POWER_CAP_LOWERED, said) if lowered else "",
            evidence={
                "power_cap_w": cap,
                "power_cap_default_w": default,
                "power_w": telemetry.get("power_w"),
            },
            code=POWER_CAP_LOWERED,
        )
    ]


def _temperature(ctx: AgentContext, index: int, telemetry: dict) -> list[CheckResult]:
    hotspot = (telemetry.get("hotspot_c") or {}).get("max")
    if hotspot is None:
        return []
    verdict = judge_floor(
        hotspot,
        ctx.threshold("compute.hotspot_warn_c"),
        ctx.threshold("compute.hotspot_fail_c"),
        unit="C",
        higher_is_better=False,
    )
    code = code_for(verdict, HOTSPOT)
    hint = (
        ""
        if verdict.status == PASS
        else codes.hint(code, verdict.reason)
        if code == HOTSPOT
        else verdict.reason
    )
    return [
        CheckResult(
            id="compute.temperature",
            subject=f"gpu{index}",
            status=verdict.status,
            metric="hotspot_max",
            value=hotspot,
            unit="C",
            threshold=verdict.threshold,
            hint=hint,
            evidence={"temperatures": {k: telemetry.get(k) for k in ("temp_c", "hotspot_c", "mem_temp_c")}},
            code=code,
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
