"""Thermal readings you can trust: fans that respond, sensors that are alive, temperatures that
stay below the card's limits. Pure functions over one GPU's series of samples taken under load.

Owners' R9700s reached 109 C with a blower that never spun after an SMU interface mismatch
(ROCm/legacy-rocm-build#6101; kyuz0/amd-r9700-ai-toolboxes#5: `fan1_input` stays at 0 under
load), and monitoring that trusts a stuck sensor sees a cool card. So, per GPU:

- fan:    where the card reports a fan, a fan at 0 rpm through the load while the hotspot rises
          past `fan_stall_hotspot_c` or by `fan_stall_rise_c` is FAN_STALLED (FAIL); a fan that
          slows while the temperature climbs is a WARN. A card that reports no fan is SKIP.
- sensors: a temperature that never changes during the whole load, or any reading (temperature,
          power, fan) that returns errors, is stale. No live temperature sensor at all is THERMALLY_BLIND
          (FAIL); a stale or failing one is INCONCLUSIVE with its name (never PASS).
- limits: each temperature's maximum against the card's critical limit (the driver's
          temp*_crit when readable, else the manifest: R9700 hotspot 110 C, memory 108 C,
          ROCm/rocm-systems#11781): FAIL within `crit_fail_margin_c`, WARN within
          `crit_warn_margin_c`, and a WARN when it is still climbing at the end fast enough to
          reach the limit within `projection_min` minutes.
A healthy R9700 under load runs its blower at 3000-4200 rpm with the junction at 68-74 C and
memory at 77-83 C at 209 W (Tanguille/cluster#4132): far from every rule here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from r9700ctl.agent import codes, stats
from r9700ctl.agent.result import FAIL, INCONCLUSIVE, PASS, SKIP, WARN

TEMPERATURES = ("temp_c", "hotspot_c", "mem_temp_c")  # edge, junction (hotspot), memory
LABELS = {
    "temp_c": "edge",
    "hotspot_c": "hotspot",
    "mem_temp_c": "memory",
    "power_w": "board power",
    "fan_rpm": "fan",
}

# The thresholds.yaml keys (family "thermal") the judges read; thresholds.yaml says why each value.
KEYS = (
    "fan_stall_hotspot_c",
    "fan_stall_rise_c",
    "fan_slowdown_rise_c",
    "fan_change_fraction",
    "stale_min_samples",
    "stale_min_seconds",
    "crit_fail_margin_c",
    "crit_warn_margin_c",
    "rising_c_per_min",
    "projection_min",
)
THRESHOLDS = tuple(f"thermal.{key}" for key in KEYS)


@dataclass
class Series:
    """One GPU's readings under load: times (s) and, per sensor, a value or None per sample;
    `errors` counts the reads that failed per sensor (EBUSY, EIO, a vanished hwmon file)."""

    t: list[float]
    values: dict[str, list[float | None]]
    errors: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_samples(cls, samples: Iterable[Mapping[str, Any]], sensors: Sequence[str] = ()) -> Series:
        """From sample dicts ({"t": 0.1, "hotspot_c": 61.0, ...}); a sensor absent from a sample is None."""
        rows = list(samples)
        names = list(sensors) or sorted({k for r in rows for k in r if k in LABELS})
        values = {name: [_number(r.get(name)) for r in rows] for name in names}
        errors: dict[str, int] = {}
        for row in rows:
            for name in row.get("errors") or []:
                errors[name] = errors.get(name, 0) + 1
        return cls([float(r.get("t", k)) for k, r in enumerate(rows)], values, errors)

    def readings(self, sensor: str) -> list[tuple[float, float]]:
        return [(t, v) for t, v in zip(self.t, self.values.get(sensor, []), strict=False) if v is not None]

    @property
    def seconds(self) -> float:
        return self.t[-1] - self.t[0] if len(self.t) > 1 else 0.0


def _number(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


@dataclass
class Verdict:
    status: str
    metric: str
    value: float | str | None
    unit: str
    threshold: str
    reason: str
    hint: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)
    code: str = ""  # data/codes.yaml; the hint of a WARN or FAIL is the code's next step


def _head_tail(points: list[tuple[float, float]], fraction: float = 0.25) -> tuple[float, float]:
    """Median of the first and of the last `fraction` of the readings."""
    k = max(1, int(len(points) * fraction))
    return stats.median(v for _, v in points[:k]), stats.median(v for _, v in points[-k:])


def fan(series: Series, limits: Mapping[str, float], untrusted: Iterable[str] = ()) -> Verdict:
    """Does the fan respond to the load? (FAN_STALLED: ROCm/legacy-rocm-build#6101)

    `untrusted`: sensors sensors() found stale or failing; the fan is then judged against the
    other temperature, or, with none left, only a fan that plainly speeds up can PASS.
    """
    lim = limits
    rpm = series.readings("fan_rpm")
    bad = set(untrusted)
    hot = [] if "hotspot_c" in bad else series.readings("hotspot_c")
    hot = hot or ([] if "temp_c" in bad else series.readings("temp_c"))
    threshold = (
        f"fan above 0 rpm once the hotspot passes {lim['fan_stall_hotspot_c']:g} C or rises "
        f"{lim['fan_stall_rise_c']:g} C; not slowing while it rises"
    )
    if not rpm:
        why = "the card reports no fan speed (passively cooled, or the driver exposes no fan1_input)"
        if series.errors.get("fan_rpm"):
            why = f"every fan reading failed ({series.errors['fan_rpm']} errors)"
        return Verdict(SKIP, "fan_rpm", None, "rpm", threshold, why, code="FAN_SPEED_UNKNOWN")
    if not hot:
        start_rpm, end_rpm = _head_tail(rpm)
        if end_rpm > start_rpm * (1 + lim["fan_change_fraction"]):
            return Verdict(
                PASS, "fan_rpm", round(end_rpm), "rpm", threshold,
                f"fan sped up under load, {start_rpm:.0f} -> {end_rpm:.0f} rpm (no trusted temperature to "
                "compare with)",
            )  # fmt: skip
        return Verdict(
            INCONCLUSIVE, "fan_rpm", round(end_rpm), "rpm", threshold,
            "no trusted temperature to judge the fan against, and the fan did not speed up",
            code="SENSORS_UNTRUSTED",
        )  # fmt: skip
    _, end_c = _head_tail(hot)
    start_c = min(v for _, v in hot[: max(1, len(hot) // 4)])
    peak_c = max(v for _, v in hot)
    rise = peak_c - start_c
    start_rpm, end_rpm = _head_tail(rpm)
    top_rpm = max(v for _, v in rpm)
    evidence = {"rpm_start": start_rpm, "rpm_end": end_rpm, "rpm_max": top_rpm, "temp_start_c": start_c,
                "temp_max_c": peak_c, "samples": len(rpm)}  # fmt: skip
    if top_rpm <= 0 and (peak_c >= lim["fan_stall_hotspot_c"] or rise >= lim["fan_stall_rise_c"]):
        return Verdict(
            FAIL, "fan_rpm", 0.0, "rpm", threshold,
            f"fan at 0 rpm for the whole load while the hotspot rose from {start_c:.0f} to {peak_c:.0f} C",
            codes.next_step("FAN_STALLED"), evidence, "FAN_STALLED",
        )  # fmt: skip
    if top_rpm <= 0:
        return Verdict(
            PASS, "fan_rpm", 0.0, "rpm", threshold,
            f"fan stopped (zero-rpm mode) and the hotspot stayed at {peak_c:.0f} C, rising {rise:.0f} C",
            evidence=evidence,
        )  # fmt: skip
    if (
        end_rpm < start_rpm * (1 - lim["fan_change_fraction"])
        and end_c - start_c >= lim["fan_slowdown_rise_c"]
    ):
        return Verdict(
            WARN, "fan_rpm", round(end_rpm), "rpm", threshold,
            f"fan slowed from {start_rpm:.0f} to {end_rpm:.0f} rpm while the hotspot rose from {start_c:.0f} "
            f"to {end_c:.0f} C",
            codes.next_step("FAN_NOT_FOLLOWING"), evidence, "FAN_NOT_FOLLOWING",
        )  # fmt: skip
    return Verdict(
        PASS, "fan_rpm", round(top_rpm), "rpm", threshold,
        f"fan {start_rpm:.0f} -> {end_rpm:.0f} rpm (max {top_rpm:.0f}) as the hotspot went {start_c:.0f} -> "
        f"{end_c:.0f} C",
        evidence=evidence,
    )  # fmt: skip


def sensors(series: Series, limits: Mapping[str, float]) -> Verdict:
    """Are the sensors alive? A reading that never moves under load, or fails, cannot be trusted."""
    lim = limits
    threshold = (
        "every temperature reading changes at least once over "
        f">= {lim['stale_min_seconds']:g} s and {int(lim['stale_min_samples'])} samples of load, "
        "without read errors"
    )
    if len(series.t) < lim["stale_min_samples"] or series.seconds < lim["stale_min_seconds"]:
        return Verdict(
            INCONCLUSIVE, "samples", len(series.t), "samples", threshold,
            f"only {len(series.t)} samples over {series.seconds:.1f} s: too short to tell a stuck sensor "
            "from a steady one", evidence={"untrusted": sorted(series.values)}, code="TOO_FEW_SAMPLES",
        )  # fmt: skip
    stale, failing, alive, untrusted = [], [], [], []
    for name in series.values:
        points = series.readings(name)
        errors = series.errors.get(name, 0)
        if not points and not errors:
            continue  # the card has no such sensor (an H200 reports no hotspot, memory or fan)
        if errors:
            untrusted.append(name)
            failing.append(f"{LABELS.get(name, name)} ({errors} read errors)")
        elif name in TEMPERATURES and len({v for _, v in points}) == 1:
            # Only temperatures must move under load: a fan may hold a fixed speed (or stand still,
            # which fan() judges) and a board at its power cap may read the same watts each time.
            untrusted.append(name)
            stale.append(f"{LABELS.get(name, name)} stuck at {points[0][1]:g}")
        elif name in TEMPERATURES:
            alive.append(name)
    for name, count in series.errors.items():
        if name not in series.values:
            untrusted.append(name)
            failing.append(f"{LABELS.get(name, name)} ({count} read errors)")
    evidence = {
        "stale": stale,
        "failing": failing,
        "alive_temperatures": [LABELS[n] for n in alive],
        "untrusted": sorted(untrusted),
    }
    if not alive:
        return Verdict(
            FAIL, "live_temperature_sensors", 0, "sensors", threshold,
            "no temperature reading moved under load (" + "; ".join(stale + failing) + ")",
            codes.next_step("THERMALLY_BLIND"), evidence, "THERMALLY_BLIND",
        )  # fmt: skip
    if stale or failing:
        return Verdict(
            INCONCLUSIVE, "live_temperature_sensors", len(alive), "sensors", threshold,
            "not every reading can be trusted: " + "; ".join(stale + failing),
            codes.next_step("SENSORS_UNTRUSTED"), evidence, "SENSORS_UNTRUSTED",
        )  # fmt: skip
    return Verdict(
        PASS, "live_temperature_sensors", len(alive), "sensors", threshold,
        "every reading moved under load", evidence=evidence,
    )  # fmt: skip


def limit(series: Series, sensor: str, crit_c: float | None, limits: Mapping[str, float],
          source: str = "", untrusted: Iterable[str] = ()) -> Verdict:  # fmt: skip
    """One temperature against the card's critical limit, and whether it is levelling off; a
    reading sensors() found stale or failing is not judged (INCONCLUSIVE, never a PASS)."""
    lim = limits
    label = LABELS[sensor]
    points = series.readings(sensor)
    if crit_c is None:
        return Verdict(
            SKIP, f"{label}_max", None, "C", "", f"no critical {label} limit known for this card",
            code="TEMP_LIMIT_UNKNOWN",
        )  # fmt: skip
    fail_at, warn_at = crit_c - lim["crit_fail_margin_c"], crit_c - lim["crit_warn_margin_c"]
    threshold = f"{label} < {warn_at:g} C (WARN), < {fail_at:g} C (FAIL); critical {crit_c:g} C{source}"
    if sensor in set(untrusted):
        return Verdict(
            INCONCLUSIVE, f"{label}_max", None, "C", threshold,
            f"the {label} reading is stale or failing (power.sensors): its limit cannot be judged",
            code="SENSORS_UNTRUSTED",
        )  # fmt: skip
    if not points:
        return Verdict(
            INCONCLUSIVE,
            f"{label}_max",
            None,
            "C",
            threshold,
            f"no {label} reading under load",
            code="NOT_MEASURED",
        )
    peak = max(v for _, v in points)
    slope = _end_slope_c_per_min(points)
    evidence = {"max_c": peak, "end_slope_c_per_min": slope, "crit_c": crit_c, "samples": len(points)}
    if peak >= fail_at:
        return Verdict(
            FAIL, f"{label}_max", peak, "C", threshold,
            f"{label} reached {peak:.0f} C, within {crit_c - peak:.0f} C of its {crit_c:g} C critical limit",
            codes.next_step("OVERHEATING"), evidence, "OVERHEATING",
        )  # fmt: skip
    minutes_left = (crit_c - peak) / slope if slope and slope > lim["rising_c_per_min"] else math.inf
    # A straight line is extrapolated no further than the load was watched: a heating curve is
    # still steep in its first minute and levels off later (an H200 at its 700 W cap climbed
    # 12 C/min in a 60 s phase and settled near 61 C, docs/benchmarks.md).
    watched_min = (points[-1][0] - points[0][0]) / 60.0
    horizon = min(lim["projection_min"], watched_min)
    if peak >= warn_at or minutes_left < horizon:
        why = f"{label} reached {peak:.0f} C (critical {crit_c:g} C)"
        if minutes_left < horizon:
            why += f", still rising {slope:.1f} C/min: the limit in about {minutes_left:.0f} min"
        return Verdict(
            WARN, f"{label}_max", peak, "C", threshold, why,
            codes.next_step("TEMP_NEAR_LIMIT"), evidence, "TEMP_NEAR_LIMIT",
        )  # fmt: skip
    note = f"{label} max {peak:.0f} C, {crit_c - peak:.0f} C below critical"
    if slope is not None and slope > lim["rising_c_per_min"]:
        note += f" (still rising {slope:.1f} C/min at the end: a longer load, burn-in, shows the plateau)"
    return Verdict(PASS, f"{label}_max", peak, "C", threshold, note, evidence=evidence)


def _end_slope_c_per_min(points: list[tuple[float, float]]) -> float | None:
    """How fast the reading still climbs at the end, in C per minute; 0 when it is levelling off.

    Least-squares slopes of the middle and the last third: a climb that slows to half or less
    is levelling off (a heating curve approaches its plateau), so a 1 C sensor step near the
    plateau is not extrapolated into a runaway. None when the thirds are too short to fit.
    """
    third = len(points) // 3
    if third < 3:
        return None
    middle, last = _slope(points[third : 2 * third]), _slope(points[2 * third :])
    if middle is None or last is None:
        return None
    if last <= 0 or (middle > 0 and last <= middle / 2):
        return 0.0
    return last


def _slope(points: list[tuple[float, float]]) -> float | None:
    if len(points) < 3 or points[-1][0] - points[0][0] <= 0:
        return None
    fit = stats.slope([t for t, _ in points], [v for _, v in points])
    return 0.0 if fit is None else fit * 60.0
