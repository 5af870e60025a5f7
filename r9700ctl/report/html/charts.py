"""The report's charts: inline SVG from matplotlib's SVG backend, one registry of chart makers.

Why matplotlib (and not pygal): it draws every chart the report needs with one API, heatmaps
included (pygal has none), its SVG is static (no script, nothing fetched: the page opens with
no network; pygal's default SVG loads its interactivity script from the web), it is the most
widely kept plotting library in Python, and it runs without a display (Figure + the SVG canvas,
no pyplot state). It is imported only when an HTML report is written.

Adding a chart (issue 15's power and fan timelines, say): write a function that takes one
node's agent report and returns a list of Chart (empty when the report has nothing for it),
decorate it with @node_chart, and it appears in every node's section, in registry order.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

MiB = 1 << 20
PAIR = re.compile(r"^gpu(\d+)->gpu(\d+)$")
GPU = re.compile(r"^gpu(\d+)$")
SCALING = re.compile(r"^n=(\d+)\s+(\S+)$")
EXPECTED = re.compile(r"expected ([0-9.]+)x")
STYLE = {
    "svg.fonttype": "none",  # text stays text: small, selectable, in the page's font
    "font.family": "sans-serif",
    "font.size": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "figure.dpi": 96,
}


@dataclass
class Chart:
    key: str  # unique within a node: the anchor and the SVG id salt
    title: str
    svg: str
    caption: str = ""


ChartMaker = Callable[[Mapping[str, Any]], list[Chart]]
CHARTS: list[ChartMaker] = []


def node_chart(maker: ChartMaker) -> ChartMaker:
    """Register a chart maker: every node's section shows what it returns."""
    CHARTS.append(maker)
    return maker


def charts_for(report: Mapping[str, Any]) -> list[Chart]:
    out: list[Chart] = []
    for maker in CHARTS:
        out.extend(maker(report))
    return out


# --- drawing -------------------------------------------------------------------------------------


def figure(width: float, height: float) -> Any:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def to_svg(fig: Any, key: str) -> str:
    """The figure as an <svg> element to inline (no XML prolog; ids salted per chart)."""
    import matplotlib

    buffer = io.StringIO()
    with matplotlib.rc_context({**STYLE, "svg.hashsalt": key}):
        fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
    text = buffer.getvalue()
    return text[text.index("<svg") :]


def _results(report: Mapping[str, Any], check: str) -> list[Mapping[str, Any]]:
    return [r for r in report.get("results") or [] if isinstance(r, Mapping) and r.get("id") == check]


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _size_label(size: float) -> str:
    if size >= 1 << 30:
        return f"{size / (1 << 30):g} GiB"
    if size >= MiB:
        return f"{size / MiB:g} MiB"
    return f"{size / 1024:g} KiB"


# --- the charts ----------------------------------------------------------------------------------


@node_chart
def p2p_heatmap(report: Mapping[str, Any]) -> list[Chart]:
    """P2P unidirectional GB/s per ordered pair (row: source, column: destination)."""
    cells: dict[tuple[int, int], float] = {}
    for result in _results(report, "p2p.bandwidth"):
        match = PAIR.match(str(result.get("subject") or ""))
        value = _number(result.get("value"))
        if match and value is not None:
            cells[(int(match[1]), int(match[2]))] = value
    if not cells:
        return []
    import numpy as np

    gpus = sorted({i for pair in cells for i in pair})
    grid = np.full((len(gpus), len(gpus)), np.nan)
    for (src, dst), value in cells.items():
        grid[gpus.index(src), gpus.index(dst)] = value
    side = 1.2 + 0.55 * len(gpus)
    fig = figure(side + 1.2, side)
    ax = fig.subplots()
    image = ax.imshow(grid, cmap="viridis", vmin=0)
    ax.grid(False)
    labels = [f"gpu{i}" for i in gpus]
    ax.set_xticks(range(len(gpus)), labels)
    ax.set_yticks(range(len(gpus)), labels)
    ax.set_xlabel("to")
    ax.set_ylabel("from")
    low = np.nanmin(grid)
    high = np.nanmax(grid)
    for (src, dst), value in cells.items():
        dark = high > low and (value - low) / (high - low) < 0.5
        ax.text(
            gpus.index(dst),
            gpus.index(src),
            f"{value:.1f}",
            ha="center",
            va="center",
            color="white" if dark else "black",
        )
    fig.colorbar(image, ax=ax, label="GB/s")
    slowest = min(cells, key=lambda pair: cells[pair])
    caption = (
        f"{len(cells)} ordered pairs; slowest gpu{slowest[0]}->gpu{slowest[1]} at {cells[slowest]:.1f} GB/s, "
        f"median {float(np.nanmedian(grid)):.1f} GB/s"
    )
    return [Chart("p2p-matrix", "P2P bandwidth per GPU pair (GB/s)", to_svg(fig, "p2p-matrix"), caption)]


def _size_points(result: Mapping[str, Any]) -> list[tuple[float, float]]:
    """(transfer size in bytes, GB/s) points of one result: its sweep rows, else its one size."""
    evidence = result.get("evidence") if isinstance(result.get("evidence"), Mapping) else {}
    points = []
    for key in ("sizes", "sweep"):
        for row in evidence.get(key) or []:
            if not isinstance(row, Mapping):
                continue
            size = _number(row.get("size_bytes"))
            value = next(
                (_number(v) for k, v in row.items() if k.endswith("_gbs") and _number(v) is not None), None
            )
            if size and value is not None:
                points.append((size, value))
    if points:
        return sorted(points)
    size, value = _number(evidence.get("size_bytes")), _number(result.get("value"))
    if size and value is not None and result.get("unit") == "GB/s":
        return [(size, value)]
    return []


def _bandwidth_series(report: Mapping[str, Any]) -> dict[str, list[tuple[float, float]]]:
    """Points per kind of transfer (every GPU or pair of that kind together)."""
    kinds = (
        ("hostbw.h2d", "host->GPU"),
        ("hostbw.d2h", "GPU->host"),
        ("p2p.bandwidth", "P2P (per pair)"),
        ("collective.allreduce", "all-reduce busbw"),
    )
    series: dict[str, list[tuple[float, float]]] = {}
    for check, label in kinds:
        for result in _results(report, check):
            series.setdefault(label, []).extend(_size_points(result))
    return {label: sorted(points) for label, points in series.items() if points}


@node_chart
def bandwidth_vs_size(report: Mapping[str, Any]) -> list[Chart]:
    """Host<->device, P2P and all-reduce bandwidth against the transfer size: every GPU or pair
    as a point, the median per size as a line."""
    from r9700ctl.agent import stats  # the one statistics module

    series = _bandwidth_series(report)
    if not series:
        return []
    fig = figure(8.0, 3.6)
    ax = fig.subplots()
    markers = "osD^v"
    for position, (label, points) in enumerate(series.items()):
        sizes, values = zip(*points, strict=True)
        (line,) = ax.plot(sizes, values, linestyle="none", marker=markers[position % len(markers)], alpha=0.6)
        per_size = sorted({s for s, _ in points})
        medians = [stats.median(v for s, v in points if s == size) for size in per_size]
        ax.plot(
            per_size, medians, color=line.get_color(), marker=line.get_marker(), label=label, linewidth=1.2
        )
    ax.set_xscale("log", base=2)
    sizes = sorted({s for points in series.values() for s, _ in points})
    ax.set_xticks(sizes, [_size_label(s) for s in sizes])
    ax.minorticks_off()
    ax.set_xlabel("transfer size")
    ax.set_ylabel("GB/s")
    ax.set_ylim(bottom=0)
    fig.legend(fontsize=8, loc="outside right upper")
    single = [label for label, points in series.items() if len({s for s, _ in points}) == 1]
    caption = "points: each GPU or pair; line: the median per size"
    if single:
        caption += f"; measured at one size at this level: {', '.join(single)}"
    return [
        Chart("bandwidth-size", "Bandwidth against transfer size", to_svg(fig, "bandwidth-size"), caption)
    ]


@node_chart
def scaling(report: Mapping[str, Any]) -> list[Chart]:
    """Tensor-parallel speedup against GPU count: measured, ideal, and --expect-scaling."""
    modes: dict[str, dict[int, float]] = {}
    expected: dict[int, float] = {}
    for result in _results(report, "scaling.tp"):
        match = SCALING.match(str(result.get("subject") or ""))
        value = _number(result.get("value"))
        if not match or value is None:
            continue
        n, mode = int(match[1]), match[2]
        modes.setdefault(mode, {1: 1.0})[n] = value
        evidence = result.get("evidence") if isinstance(result.get("evidence"), Mapping) else {}
        want = _number(evidence.get("expected_speedup"))
        found = EXPECTED.search(str(result.get("threshold") or ""))
        if want is None and found:
            want = float(found[1])
        if want is not None:
            expected[n] = want
    if not modes:
        return []
    fig = figure(5.5, 3.4)
    ax = fig.subplots()
    top = max(n for points in modes.values() for n in points)
    ax.plot([1, top], [1, top], linestyle="--", color="grey", label="ideal (speedup = GPUs)")
    for mode, points in sorted(modes.items()):
        ns = sorted(points)
        ax.plot(ns, [points[n] for n in ns], marker="o", label=f"measured, {mode.replace('_', ' ')}")
    if expected:
        ns = sorted(expected)
        ax.plot(
            ns,
            [expected[n] for n in ns],
            linestyle="none",
            marker="*",
            markersize=10,
            label="--expect-scaling",
        )
    ax.set_xticks(sorted({n for points in modes.values() for n in points}))
    ax.set_xlabel("GPUs")
    ax.set_ylabel("speedup")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7)
    efficiency = ", ".join(
        f"{n} GPUs {points[n] / n:.0%}"
        for mode, points in sorted(modes.items())
        if mode == "p2p_on"
        for n in sorted(points)
        if n > 1
    )
    caption = f"efficiency (speedup / GPUs): {efficiency}" if efficiency else ""
    return [Chart("scaling", "Scaling against ideal and --expect-scaling", to_svg(fig, "scaling"), caption)]


TIMELINE_SERIES = (
    ("sclk_mhz", "shader clock (MHz)"),
    ("temp_c", "temperature (°C)"),
    ("power_w", "power (W)"),
)


@node_chart
def load_timelines(report: Mapping[str, Any]) -> list[Chart]:
    """Clock, temperature and power sampled during the GEMM load phase, per GPU."""
    per_gpu: dict[int, list[Mapping[str, Any]]] = {}
    for result in _results(report, "compute.throttle"):
        evidence = result.get("evidence") if isinstance(result.get("evidence"), Mapping) else {}
        for sample in evidence.get("samples") or []:
            if isinstance(sample, Mapping) and _number(sample.get("t")) is not None:
                per_gpu.setdefault(int(sample.get("gpu", 0)), []).append(sample)
    if not per_gpu:
        return []
    shown = [(key, label) for key, label in TIMELINE_SERIES if _has(per_gpu.values(), key)]
    if not shown:
        return []
    fig = figure(7.5, 1.6 * len(shown) + 0.6)
    axes = fig.subplots(len(shown), 1, sharex=True, squeeze=False)[:, 0]
    for ax, (key, label) in zip(axes, shown, strict=True):
        for gpu, samples in sorted(per_gpu.items()):
            points = [(float(s["t"]), _number(s.get(key))) for s in samples]
            points = [(t, v) for t, v in points if v is not None]
            if points:
                ax.plot(*zip(*points, strict=True), linewidth=1, label=f"gpu{gpu}")
        ax.set_ylabel(label, fontsize=8)
    axes[-1].set_xlabel("seconds into the load phase")
    if len(per_gpu) > 1:
        axes[0].legend(fontsize=7, ncols=min(4, len(per_gpu)))
    samples = sum(len(s) for s in per_gpu.values())
    caption = f"{samples} samples on {len(per_gpu)} GPU(s) while GEMM ran on all of them"
    return [
        Chart(
            "load-timeline", "Clock, temperature and power under load", to_svg(fig, "load-timeline"), caption
        )
    ]


def _has(groups: Iterable[list[Mapping[str, Any]]], key: str) -> bool:
    return any(_number(s.get(key)) is not None for samples in groups for s in samples)


def sparkline(values: list[float], key: str) -> str:
    """A figure's history as a small line (the last point marked): an inline SVG."""
    fig = figure(1.4, 0.32)
    fig.set_layout_engine("none")
    ax = fig.add_axes((0.02, 0.1, 0.96, 0.8))
    ax.plot(range(len(values)), values, linewidth=1, color="#0969da")
    ax.plot([len(values) - 1], [values[-1]], marker="o", markersize=2.5, color="#cf222e")
    ax.set_axis_off()
    return to_svg(fig, key)
