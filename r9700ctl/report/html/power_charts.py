"""The report's charts of the staged power phase and of PCIe errors (agent checks power and aer),
registered through charts.node_chart.

- power phase: per GPU the board power (highest reading per half second), the total each PSU
  carried against its rating and its margin, the hotspot and memory temperatures and the fan
  speed, the stages (each GPU alone, then all) shaded;
- PCIe errors: new AER errors per GPU and kind during the run, only when there were any.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from r9700ctl.report.html.charts import Chart, _number, _results, figure, node_chart, to_svg

PANELS = (
    ("power_w", "board power (W)"),
    ("hotspot_c", "hotspot (C)"),
    ("mem_temp_c", "memory (C)"),
    ("fan_rpm", "fan (rpm)"),
)
AER_KINDS = ("correctable", "nonfatal", "fatal")


def _evidence(result: Mapping[str, Any]) -> Mapping[str, Any]:
    evidence = result.get("evidence")
    return evidence if isinstance(evidence, Mapping) else {}


def _psu_totals(
    report: Mapping[str, Any], gpus: Mapping[str, Mapping[str, list[Any]]]
) -> list[tuple[str, list[float], list[float], float, float]]:
    """(name, t, total W per bin, rating, usable) per PSU, from the timeline bins of its GPUs."""
    index_of = {
        str(g.get("pci_address")): str(g.get("index"))
        for g in report.get("gpus") or []
        if isinstance(g, Mapping)
    }
    out = []
    for result in report.get("results") or []:
        if not (isinstance(result, Mapping) and str(result.get("id", "")).startswith("power.psu.")):
            continue
        draw, psu = _evidence(result).get("draw"), _evidence(result).get("psu")
        if not isinstance(draw, Mapping) or not isinstance(psu, Mapping):
            continue
        members = [index_of.get(str(a)) for a in psu.get("gpus") or []]
        series = [gpus.get(m or "") for m in members]
        if not series or any(s is None for s in series):
            continue
        length = min(len(s["t"]) for s in series)  # type: ignore[index]
        t, totals = [], []
        for k in range(length):
            values = [_number(s["power_w"][k]) for s in series]  # type: ignore[index]
            if all(v is not None for v in values):
                t.append(float(series[0]["t"][k]))  # type: ignore[index]
                totals.append(sum(values) + float(psu.get("host_w") or 0))  # type: ignore[arg-type]
        watts = float(draw.get("watts") or 0)
        out.append((str(psu.get("name")), t, totals, watts, float(draw.get("usable_w") or watts)))
    return out


@node_chart
def power_phase(report: Mapping[str, Any]) -> list[Chart]:
    sampling = next(iter(_results(report, "power.sampling")), None)
    if sampling is None:
        return []
    timeline = _evidence(sampling).get("timeline") or {}
    gpus = timeline.get("gpus") if isinstance(timeline, Mapping) else None
    if not isinstance(gpus, Mapping) or not gpus:
        return []
    psus = _psu_totals(report, gpus)
    panels = [
        (k, label)
        for k, label in PANELS
        if any(_number(v) is not None for g in gpus.values() for v in g.get(k) or [])
    ]
    rows = len(panels) + (1 if psus else 0)
    if not rows:
        return []
    fig = figure(7.5, 1.5 * rows + 0.6)
    axes = list(fig.subplots(rows, 1, sharex=True, squeeze=False)[:, 0])
    stages = [s for s in _evidence(sampling).get("stages") or [] if isinstance(s, Mapping)]
    for ax in axes:
        for k, stage in enumerate(s for s in stages if s.get("name") != "idle"):
            ax.axvspan(float(stage["t0"]), float(stage["t1"]), alpha=0.06 if k % 2 else 0.12, color="grey")
    row = 0
    if psus:
        ax = axes[row]
        for name, t, totals, watts, usable in psus:
            line = ax.plot(t, totals, linewidth=1, label=f"{name}")[0]
            ax.axhline(watts, color=line.get_color(), linestyle="--", linewidth=0.8)
            ax.axhline(usable, color=line.get_color(), linestyle=":", linewidth=0.8)
        ax.set_ylabel("PSU total (W)", fontsize=8)
        ax.legend(fontsize=7, ncols=min(4, len(psus)))
        row += 1
    for key, label in panels:
        ax = axes[row]
        for gpu, series in sorted(gpus.items(), key=lambda item: int(item[0])):
            points = [
                (float(t), _number(v))
                for t, v in zip(series.get("t") or [], series.get(key) or [], strict=False)
            ]
            points = [(t, v) for t, v in points if v is not None]
            if points:
                ax.plot(*zip(*points, strict=True), linewidth=1, label=f"gpu{gpu}")
        ax.set_ylabel(label, fontsize=8)
        row += 1
    axes[-1].set_xlabel("seconds into the power phase (shaded: each GPU alone, then all)")
    if len(gpus) > 1 and panels:
        axes[1 if psus else 0].legend(fontsize=7, ncols=min(4, len(gpus)))
    rate = _number(sampling.get("value"))
    caption = (
        f"sampled at {rate:g} Hz per GPU; dashed: each PSU's rating, dotted: its margin"
        if rate
        else "power phase timelines"
    )
    return [
        Chart(
            "power-phase",
            "Power, temperature and fans, each GPU alone then all",
            to_svg(fig, "power-phase"),
            caption,
        )
    ]


@node_chart
def pcie_errors(report: Mapping[str, Any]) -> list[Chart]:
    counts: dict[str, dict[str, int]] = {}
    for result in _results(report, "aer"):
        for step in _evidence(result).get("with_errors") or []:
            for increase in step.get("increases") or [] if isinstance(step, Mapping) else []:
                kind = increase.get("kind") if isinstance(increase, Mapping) else None
                if kind in AER_KINDS:
                    per_kind = counts.setdefault(str(result.get("subject")), dict.fromkeys(AER_KINDS, 0))
                    per_kind[kind] += int(increase.get("delta") or 0)
    if not counts:
        return []
    fig = figure(6.0, 2.2)
    ax = fig.subplots()
    subjects = sorted(counts)
    bottom = [0] * len(subjects)
    for kind in AER_KINDS:
        values = [counts[s][kind] for s in subjects]
        ax.bar(subjects, values, bottom=bottom, label=kind)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax.set_ylabel("new AER errors", fontsize=8)
    ax.legend(fontsize=7)
    caption = "PCIe errors counted on each GPU's path to its root port during the run's load steps"
    return [Chart("pcie-errors", "PCIe errors (AER) during the run", to_svg(fig, "pcie-errors"), caption)]
