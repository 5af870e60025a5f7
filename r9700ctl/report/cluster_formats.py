"""`validate --cluster` in the other formats: an HTML page with a node x node heatmap per phase, and
JUnit and Prometheus through the validate-fleet shape they already read (r9700ctl/cluster/history.py,
which the history records too).
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

from r9700ctl.agent.result import SEVERITY, CheckResult
from r9700ctl.cluster.history import as_fleet_document

if TYPE_CHECKING:
    from r9700ctl.cluster.model import ClusterReport, Matrix


def render(name: str, report: ClusterReport) -> str:
    """The cluster report in format `name`: html (heatmaps per phase), junit, prom."""
    from r9700ctl.report.formats import render_junit, render_prometheus

    if name == "html":
        return render_html(report)
    document = as_fleet_document(report)
    return render_junit(document) if name == "junit" else render_prometheus(document)


# --- HTML ------------------------------------------------------------------------------------------

PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>r9700ctl validate --cluster: {status}</title>
<style>
body {{ font-family: sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; margin: 0.5em 0 1.5em; }}
td, th {{ border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }}
.PASS {{ color: #176f2c; }} .WARN {{ color: #9a6700; }} .FAIL, .ERROR {{ color: #b42318; font-weight: bold; }}
.INCONCLUSIVE, .SKIP {{ color: #555; }}
.culprit {{ border-left: 4px solid #b42318; padding: 0.5em 1em; background: #fdf2f2; }}
</style></head><body>
<h1>Cluster validation: <span class="{status}">{status}</span></h1>
<p>group {group}, network {network}, nodes {nodes}; started {started}; r9700ctl {version}</p>
{culprit}
{phases}
</body></html>
"""


def render_html(report: ClusterReport) -> str:
    from r9700ctl import __version__

    culprit = report.culprit()
    culprit_html = ""
    if culprit is not None:
        culprit_html = (
            f'<div class="culprit"><p><b>{html.escape(culprit["kind"])} '
            f"{html.escape(culprit['subject'])}</b>, "
            f"found by the {html.escape(culprit['phase'])} phase: {html.escape(culprit['status'])} "
            f"{html.escape(culprit['code'])}: {html.escape(culprit['said'])}</p>"
            f"<p>Next: {html.escape(culprit['next'])}</p></div>"
        )
    sections = []
    for phase in report.phases:
        parts = [f'<h2>{html.escape(phase.name)}: <span class="{phase.status}">{phase.status}</span></h2>']
        if phase.note:
            parts.append(f"<p>{html.escape(phase.note)}</p>")
        if phase.matrix is not None and phase.matrix.values:
            parts.append(heatmap(phase.matrix, f"{report.group}-{phase.name}", phase.name))
        rows = sorted(phase.results, key=lambda r: -SEVERITY[r.status])
        cells = "".join(
            f'<tr><td class="{r.status}">{r.status}</td><td>{html.escape(r.code)}</td>'
            f"<td>{html.escape(r.id)}</td>"
            f"<td>{html.escape(r.subject)}</td><td>{html.escape(_value(r))}</td><td>{html.escape(r.hint)}</td></tr>"
            for r in rows
        )
        parts.append(
            "<table><tr><th>status</th><th>code</th><th>check</th><th>subject</th><th>value</th>"
            f"<th>finding and next step</th></tr>{cells}</table>"
        )
        sections.append("\n".join(parts))
    return PAGE.format(
        status=html.escape(report.status),
        group=html.escape(report.group),
        network=html.escape(report.network),
        nodes=html.escape(", ".join(report.nodes)),
        started=html.escape(report.started),
        version=html.escape(__version__),
        culprit=culprit_html,
        phases="\n".join(sections),
    )


def _value(result: CheckResult) -> str:
    if isinstance(result.value, float):
        return f"{result.value:.4g} {result.unit}".strip()
    return "" if result.value is None else f"{result.value} {result.unit}".strip()


def heatmap(matrix: Matrix, key: str, phase: str) -> str:
    """A node x node heatmap (inline SVG, matplotlib's SVG backend as the validate report's charts)."""
    import numpy as np

    from r9700ctl.report.html.charts import figure, to_svg

    nodes = sorted(matrix.values)
    grid = np.full((len(nodes), len(nodes)), np.nan)
    for i, a in enumerate(nodes):
        for j, b in enumerate(nodes):
            value = matrix.values.get(a, {}).get(b)
            if value is not None and a != b:
                grid[i, j] = value
    side = 1.4 + 0.7 * len(nodes)
    fig = figure(side + 1.4, side)
    ax = fig.subplots()
    image = ax.imshow(grid, cmap="viridis", vmin=0)
    ax.grid(False)
    ax.set_xticks(range(len(nodes)), nodes, rotation=45, ha="right")
    ax.set_yticks(range(len(nodes)), nodes)
    high = float(np.nanmax(grid)) if not np.all(np.isnan(grid)) else 0.0
    for i in range(len(nodes)):
        for j in range(len(nodes)):
            if not np.isnan(grid[i, j]):
                dark = high > 0 and grid[i, j] / high < 0.5  # viridis: light text on its dark low end
                color = "white" if dark else "black"
                ax.text(j, i, f"{grid[i, j]:.3g}", ha="center", va="center", color=color, fontsize=8)
    fig.colorbar(image, ax=ax, label=matrix.unit)
    title = f"{phase}: node x node ({matrix.unit}); an empty cell was not measured"
    return f"<figure>{to_svg(fig, key)}<figcaption>{html.escape(title)}</figcaption></figure>"
