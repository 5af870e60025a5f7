"""The staged power phase (standard, burn-in): each GPU loaded alone, then all at once, the board
power of every GPU sampled at >= 10 Hz (kernels/power.py), then judged:

- power.sampling: the sampler's achieved rate against power.sample_hz_min (below it the peaks
  are INCONCLUSIVE: a slower sampler averages a PSU's worst moments away); the node's total
  peak and sustained draw and the timelines for the report are its evidence.
- power.cap (per GPU): the cap in force beside the draw measured in the card's own stage and
  with all cards loaded, and the cap r9700_power set (/etc/r9700ctl/power.json); a card whose
  sustained draw exceeds its cap x power.cap_exceed_fraction WARNs (it does not hold its cap).
- power.psu.<name> (per PSU of the node's policy file): the sustained total (its GPUs as measured
  + its declared host share) against its rating, FAIL over, WARN inside the margin (the rule
  preflight applies to the caps), and the peak: above the rating a WARN (power.judge_draw says why).
- power.fan, power.sensors, power.temp_hotspot / temp_memory / temp_edge (per GPU), on the readings from
  the start of the card's own stage to the end (r9700ctl/agent/thermal.py): a fan that never
  spins, sensors that never move or fail ("thermally blind"), temperatures that approach the
  card's critical limits (the driver's temp*_crit, else the manifest's temp_crit_c).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

from r9700ctl.agent import codes, stats, thermal
from r9700ctl.agent import power_budget as power
from r9700ctl.agent.checks import _measure, register
from r9700ctl.agent.context import AgentContext
from r9700ctl.agent.kernels.specs import PowerSpec
from r9700ctl.agent.levels import from_level
from r9700ctl.agent.result import FAIL, INCONCLUSIVE, PASS, SKIP, WARN, CheckResult

THRESHOLDS = (
    "power.sample_hz_min",
    "power.sustained_window_s",
    "power.cap_exceed_fraction",
    "compute.hotspot_warn_c",
    *thermal.THRESHOLDS,
)
DEFAULTS: dict[str, dict[str, Any]] = {
    # standard: 10 s per GPU alone (the draw settles at the cap within seconds), 30 s all at once
    # (PSU over-power protection answers a held load; temperatures climb toward their plateau).
    "standard": {"power.stage_s": 10.0, "power.all_s": 30.0},
    # burn-in: long enough for temperatures and fans to level off.
    "burnin": {"power.stage_s": 30.0, "power.all_s": 180.0},
}
TIMELINE_BIN_S = 0.5  # report timelines: the highest power and the last temperature per half second
SENSOR_CHECKS = {
    "hotspot_c": "power.temp_hotspot",
    "mem_temp_c": "power.temp_memory",
    "temp_c": "power.temp_edge",
}
CAP_NOT_HELD = "CAP_NOT_HELD"
CAP_NOT_APPLIED = "CAP_NOT_APPLIED"


@register(id="power", levels=from_level("standard"), order=65, thresholds=THRESHOLDS)
def run(ctx: AgentContext) -> list[CheckResult]:
    stage_s = float(_measure.param(ctx, "power.stage_s", DEFAULTS))
    all_s = float(_measure.param(ctx, "power.all_s", DEFAULTS))
    spec = PowerSpec(
        gpus=tuple(ctx.gpu_indices),
        stage_s=stage_s,
        all_s=all_s,
        pci_addresses={g.index: g.pci_address or None for g in ctx.gpus},
        link_addresses={g.index: g.link.at or g.pci_address or None for g in ctx.gpus},
        root=str(ctx.root),
        hotspot_credible_c=float(ctx.threshold("compute.hotspot_warn_c")),
    )
    expected = spec.idle_s + len(ctx.gpus) * stage_s + (all_s if len(ctx.gpus) > 1 else 0) + 30
    outcome = _measure.run_kernel(
        ctx, "power.staged", ctx.gpu_indices, "power.staged_power", spec, expected_s=expected
    )
    if not outcome.ok:
        return [ctx.outcome_result("power.staged", "node", outcome)]
    return judge(ctx, outcome.value)


def judge(ctx: AgentContext, value: Mapping[str, Any]) -> list[CheckResult]:
    """Every result of the phase from the kernel's answer (tests hand a recorded one in)."""
    samples = list(value.get("samples") or [])
    sampler = value.get("sampler") or {}
    stages = list(value.get("stages") or [])
    policy, policy_error = power.load_policy(ctx.root)
    window_s = float(ctx.threshold("power.sustained_window_s"))
    sampling = _sampling(ctx, samples, sampler, stages, window_s)
    results = [sampling]
    if sampling.status == INCONCLUSIVE and not any(s.get("power_w") is not None for s in samples):
        return results  # no power reading at all: nothing below could be judged
    fast_enough = sampling.status == PASS
    for gpu in ctx.gpus:
        results.append(_cap(ctx, gpu.index, gpu.pci_address, samples, stages, policy, window_s))
    results.extend(_psus(ctx, samples, policy, policy_error, window_s, fast_enough, sampling.value))
    for gpu in ctx.gpus:
        results.extend(_thermal(ctx, gpu.index, samples, stages, value.get("limits") or {}))
    return results


def _mine(samples: list[Mapping[str, Any]], index: int, since: float = 0.0) -> list[Mapping[str, Any]]:
    return [s for s in samples if s.get("gpu") == index and float(s.get("t", 0)) >= since]


def _stage(stages: list[Mapping[str, Any]], name: str) -> Mapping[str, Any] | None:
    return next((s for s in stages if s.get("name") == name), None)


def _within(samples: list[Mapping[str, Any]], stage: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    if stage is None:
        return []
    return [s for s in samples if stage["t0"] <= float(s.get("t", -1)) <= stage["t1"]]


def _points(samples: list[Mapping[str, Any]], key: str = "power_w") -> list[tuple[float, float]]:
    return [(float(s["t"]), float(s[key])) for s in samples if isinstance(s.get(key), (int, float))]


def _sampling(
    ctx: AgentContext,
    samples: list[Mapping[str, Any]],
    sampler: Mapping[str, Any],
    stages: list[Mapping[str, Any]],
    window_s: float,
) -> CheckResult:
    hz_min = float(ctx.threshold("power.sample_hz_min"))
    rates = {k: v for k, v in (sampler.get("rate_hz") or {}).items() if v is not None}
    node = _node_totals(ctx, samples)
    evidence = {
        "source": sampler.get("source"),
        "interval_s": sampler.get("interval_s"),
        "rate_hz": rates,
        "sampler_errors": sampler.get("errors") or [],
        "stages": stages,
        "node_peak_w": round(max((w for _, w in node), default=0.0), 1) if node else None,
        "node_sustained_w": round(stats.max_window_mean(node, window_s), 1) if node else None,
        "sustained_window_s": window_s,
        "timeline": timeline(samples),
    }
    threshold = f">= {hz_min:g} Hz per GPU ({ctx.threshold_text('power.sample_hz_min')})"
    verdict = partial(
        CheckResult,
        id="power.sampling",
        subject="node",
        metric="sample_rate_hz",
        unit="Hz",
        threshold=threshold,
        evidence=evidence,
    )
    if not sampler.get("source") or not rates:
        said = (
            "no power telemetry on this node (amdgpu hwmon, NVML or nvidia-smi): nothing of the power "
            "phase can be judged"
        )
        return verdict(status=INCONCLUSIVE, hint=said, code="TELEMETRY_MISSING")
    slowest = min(rates.values())
    if slowest < hz_min:
        said = (
            f"power sampled at {slowest:.1f} Hz, below {hz_min:g} Hz: short peaks fall between samples, so "
            "the peaks are not judged (a slow sysfs or NVML read; fewer GPUs per run reads faster)"
        )
        return verdict(status=INCONCLUSIVE, value=round(slowest, 1), hint=said, code="POWER_SAMPLING_SLOW")
    return verdict(status=PASS, value=round(slowest, 1))


def _node_totals(ctx: AgentContext, samples: list[Mapping[str, Any]]) -> list[tuple[float, float]]:
    everyone = power.Psu("node", 1.0, tuple(g.pci_address for g in ctx.gpus if g.pci_address))
    return power.psu_totals(samples, everyone, {g.pci_address: g.index for g in ctx.gpus if g.pci_address})


def _cap(
    ctx: AgentContext,
    index: int,
    address: str | None,
    samples: list[Mapping[str, Any]],
    stages: list[Mapping[str, Any]],
    policy: power.Policy | None,
    window_s: float,
) -> CheckResult:
    mine = _mine(samples, index)
    caps = [s["power_cap_w"] for s in mine if isinstance(s.get("power_cap_w"), (int, float))]
    defaults = [
        s["power_cap_default_w"] for s in mine if isinstance(s.get("power_cap_default_w"), (int, float))
    ]
    alone = _points(_within(mine, _stage(stages, f"gpu{index}")))
    together = _points(_within(mine, _stage(stages, "all")))
    wanted = policy.caps_w.get(address or "") if policy else None
    evidence = {
        "cap_in_force_w": caps[-1] if caps else None,
        "cap_default_w": defaults[-1] if defaults else None,
        "cap_set_by_r9700_power_w": wanted,
        "peak_w": round(max((w for _, w in _points(mine)), default=0.0), 1) or None,
        "sustained_alone_w": round(stats.max_window_mean(alone, window_s), 1) if alone else None,
        "sustained_all_w": round(stats.max_window_mean(together, window_s), 1) if together else None,
    }
    exceed = float(ctx.threshold("power.cap_exceed_fraction"))
    threshold = f"sustained draw <= cap x {exceed:g}; the cap r9700_power set is the one in force"
    verdict = partial(
        CheckResult,
        id="power.cap",
        subject=f"gpu{index}",
        metric="power_cap",
        unit="W",
        threshold=threshold,
        evidence=evidence,
    )
    if not caps:
        said = "the card reports no power cap (hwmon power1_cap, NVML enforced limit)"
        return verdict(status=SKIP, hint=said, code="TELEMETRY_MISSING")
    cap = caps[-1]
    held = [v for v in (evidence["sustained_alone_w"], evidence["sustained_all_w"]) if v is not None]
    sustained = max(held) if held else None
    beside = f"cap {cap:.0f} W in force; drew {evidence['peak_w']} W peak"
    if sustained is not None:
        beside += f", {sustained:.0f} W sustained over {window_s:g} s"
    verdict = partial(verdict, value=round(cap, 1))
    if wanted is not None and abs(cap - wanted) > 1.0:
        said = f"r9700_power set {wanted:g} W for this card but {cap:g} W is in force"
        hint = codes.hint(CAP_NOT_APPLIED, said) + f" ({beside})"
        return verdict(status=WARN, hint=hint, code=CAP_NOT_APPLIED)
    if sustained is not None and sustained > cap * exceed:
        hint = codes.hint(CAP_NOT_HELD, "the card's sustained draw is above its cap") + f" ({beside})"
        return verdict(status=WARN, hint=hint, code=CAP_NOT_HELD)
    return verdict(status=PASS, hint=beside + (" (set by r9700_power)" if wanted is not None else ""))


def _psus(
    ctx: AgentContext,
    samples: list[Mapping[str, Any]],
    policy: power.Policy | None,
    policy_error: str,
    window_s: float,
    fast_enough: bool,
    rate_hz: Any,
) -> list[CheckResult]:
    if policy_error:
        return [
            CheckResult(
                id="power.psu",
                subject="node",
                status=INCONCLUSIVE,
                hint=f"the node's power policy is unreadable: {policy_error}",
                code="POWER_POLICY_UNREADABLE",
            )
        ]
    if policy is None or not policy.psus:
        return [
            CheckResult(
                id="power.psu", subject="node", status=SKIP,
                hint="no PSU map on this node (r9700_psus, written to /etc/r9700ctl/power.json by "
                "provision): the draw per PSU is not judged", code="PSU_MAP_MISSING",
            )
        ]  # fmt: skip
    index_of = {g.pci_address: g.index for g in ctx.gpus if g.pci_address}
    results = []
    for psu in policy.psus:
        usable = psu.watts * (1 - policy.margin)
        threshold = f"sustained <= {usable:g} W ({policy.margin:.0%} margin, WARN above)"
        threshold += f", <= {psu.watts:g} W (FAIL above); peaks <= {psu.watts:g} W (WARN above)"
        missing = [a for a in psu.gpus if a not in index_of]
        series = power.psu_totals(samples, psu, index_of)
        verdict = partial(
            CheckResult,
            id=f"power.psu.{psu.name}",
            subject=psu.name,
            metric="psu_sustained_w",
            unit="W",
            threshold=threshold,
        )
        if missing or not series:
            why = (
                f"{', '.join(missing)} fed by it was not measured in this run"
                if missing
                else "no power readings"
            )
            evidence = {"psu": psu.to_dict()}
            results.append(
                verdict(
                    status=INCONCLUSIVE, hint=f"PSU {psu.name}: {why}", evidence=evidence, code="NOT_MEASURED"
                )
            )
            continue
        peak, sustained = max(w for _, w in series), stats.max_window_mean(series, window_s)
        line = power.judge_draw(psu, peak, sustained, policy.margin, window_s)
        evidence = {"psu": psu.to_dict(), "draw": line.to_dict(), "samples": len(series)}
        status, hint = line.status, (f"{line.detail}; fix: {line.fix}" if line.fix else line.detail)
        code = line.code
        if not fast_enough:
            status, code = INCONCLUSIVE, "POWER_SAMPLING_SLOW"
            hint = f"{line.detail}; not judged: power sampled at {rate_hz} Hz, below power.sample_hz_min"
        results.append(
            verdict(status=status, value=round(sustained, 1), hint=hint, evidence=evidence, code=code)
        )
    return results


def _thermal(
    ctx: AgentContext,
    index: int,
    samples: list[Mapping[str, Any]],
    stages: list[Mapping[str, Any]],
    limits: Mapping[str, Any],
) -> list[CheckResult]:
    own = _stage(stages, f"gpu{index}")
    mine = _mine(samples, index, float(own["t0"]) if own else 0.0)
    series = thermal.Series.from_samples(mine, ("temp_c", "hotspot_c", "mem_temp_c", "power_w", "fan_rpm"))
    lim = {key: float(ctx.threshold(f"thermal.{key}")) for key in thermal.KEYS}
    subject = f"gpu{index}"
    sensors = thermal.sensors(series, lim)
    untrusted = sensors.evidence.get("untrusted", [])
    fan = _result("power.fan", subject, thermal.fan(series, lim, untrusted))
    if fan.status == FAIL:  # the manifest's known issue (stopped R9700 fans) and its workaround
        fan.hint = "; ".join([fan.hint, *_measure.known_issue_hints(ctx, "power.fan", fan.hint, fan.code)])
    out = [_result("power.sensors", subject, sensors), fan]
    driver = limits.get(str(index)) or {}
    manifest = ctx.model_spec.get("temp_crit_c") or {}
    for sensor, check_id in SENSOR_CHECKS.items():
        crit, source = driver.get(sensor), " (the driver's temp*_crit)"
        if crit is None and manifest.get(sensor) is not None:
            crit, source = float(manifest[sensor]), " (manifest temp_crit_c)"
        verdict = thermal.limit(series, sensor, crit, lim, source, untrusted)
        if verdict.status == SKIP and not series.readings(sensor):
            continue  # the card has neither this sensor nor a limit for it: nothing to report
        out.append(_result(check_id, subject, verdict))
    return out


def _result(check_id: str, subject: str, verdict: thermal.Verdict) -> CheckResult:
    hint = (
        verdict.reason if verdict.status in (PASS, SKIP) else f"{verdict.reason}; {verdict.hint}".rstrip("; ")
    )
    v = verdict
    return CheckResult(
        id=check_id,
        subject=subject,
        status=v.status,
        metric=v.metric,
        value=v.value,
        unit=v.unit,
        threshold=v.threshold,
        hint=hint,
        evidence=v.evidence,
        code=v.code,
    )


def timeline(samples: list[Mapping[str, Any]], bin_s: float = TIMELINE_BIN_S) -> dict[str, Any]:
    """Per GPU, the highest power and the last temperature and fan reading in each bin (for the
    report's charts: a 10 Hz phase of 8 GPUs would otherwise weigh megabytes)."""
    out: dict[str, dict[str, list[Any]]] = {}
    bins: dict[tuple[int, int], dict[str, Any]] = {}
    for sample in samples:
        index = sample.get("gpu")
        if not isinstance(index, int):
            continue
        key = (index, int(float(sample.get("t", 0)) / bin_s))
        slot = bins.setdefault(key, {})
        watts = sample.get("power_w")
        if isinstance(watts, (int, float)):
            slot["power_w"] = max(float(watts), slot.get("power_w", float("-inf")))
        for name in ("hotspot_c", "mem_temp_c", "temp_c", "fan_rpm"):
            if isinstance(sample.get(name), (int, float)):
                slot[name] = float(sample[name])
    for (index, b), slot in sorted(bins.items()):
        series = out.setdefault(str(index), {"t": []})
        series["t"].append(round(b * bin_s, 2))
        for name in ("power_w", "hotspot_c", "mem_temp_c", "temp_c", "fan_rpm"):
            series.setdefault(name, []).append(round(slot[name], 1) if name in slot else None)
    return {"bin_s": bin_s, "gpus": out}
