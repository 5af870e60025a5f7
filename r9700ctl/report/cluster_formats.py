"""`validate --cluster` in the other formats: an HTML page with a node x node heatmap per phase, and
JUnit, Prometheus and the history through the validate-fleet shape they already read.

The fleet shape: each node's own verdicts (facts about it, isolation blaming it) form its report;
every verdict about a pair or the whole cluster goes to the pseudo-node `cluster@GROUP` (a name no
inventory host can have: '@' is no host name character), so a pair's figures keep one history.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import TYPE_CHECKING, Any

from r9700ctl.agent.result import SEVERITY, CheckResult, overall
from r9700ctl.report.formats import FLEET_SCHEMA, NODE_SCHEMA

if TYPE_CHECKING:
    from r9700ctl.cluster.model import ClusterReport, Matrix
    from r9700ctl.history.runs import HistoryPlan

LEVEL = "cluster"


def cluster_node(report: ClusterReport) -> str:
    return f"cluster@{report.group}"


def node_reports(report: ClusterReport) -> dict[str, dict[str, Any]]:
    """node (and cluster@GROUP) -> an agent-shaped report holding its verdicts."""
    by_node: dict[str, list[CheckResult]] = {n: [] for n in report.nodes}
    by_node[cluster_node(report)] = []
    for result in report.results:
        by_node.setdefault(
            result.subject if result.subject in report.nodes else cluster_node(report), []
        ).append(result)
    out = {}
    for node, results in by_node.items():
        statuses = [r.status for r in results]
        out[node] = {
            "schema": NODE_SCHEMA,
            "node": node,
            "level": LEVEL,
            "started": report.started,
            "status": overall(statuses),
            "results": [r.to_dict() for r in results],
        }
    return out


def as_fleet_document(
    report: ClusterReport, reports: dict[str, dict[str, Any]] | None = None
) -> dict[str, Any]:
    from r9700ctl import __version__

    reports = reports if reports is not None else node_reports(report)
    return {
        "schema": FLEET_SCHEMA,
        "toolkit_version": __version__,
        "level": LEVEL,
        "started": report.started,
        "status": report.status,
        "exit_code": report.exit_code,
        "nodes": [{"host": n, "status": r["status"], "report": r} for n, r in reports.items()],
        "fleet": {"results": [], "compared_metrics": 0, "note": "validate --cluster"},
        "runtime": "host",
    }


def write_formats(report: ClusterReport, paths: dict[str, Any]) -> None:
    from r9700ctl.report.formats import render_junit, render_prometheus, write_text

    if isinstance(paths.get("html_path"), Path):
        write_text(paths["html_path"].expanduser(), render_html(report))
    if isinstance(paths.get("junit_path"), Path):
        write_text(paths["junit_path"].expanduser(), render_junit(as_fleet_document(report)))
    if isinstance(paths.get("prom_path"), Path):
        write_text(paths["prom_path"].expanduser(), render_prometheus(as_fleet_document(report)))


def record_history(report: ClusterReport, plan: HistoryPlan) -> list[CheckResult]:
    """Compare with the history (when asked), record the run, save a baseline (when asked); the
    comparison results join the report as the phase 'baseline'."""
    from r9700ctl.agent.baseline import figures
    from r9700ctl.cluster.model import PhaseReport

    reports = node_reports(report)
    # Compared and saved as a baseline: the reports with figures (the pairs' and the cluster's, under
    # cluster@GROUP); a node's own facts have none, and "nothing to compare" there is no finding.
    measured = {node: r for node, r in reports.items() if figures(r["results"])}
    source = str(report.reports_dir or "")
    comparisons = plan.after_run(
        measured, lambda: as_fleet_document(report, reports), scope=LEVEL, source=source
    )
    added = [r for results in comparisons.values() for r in results]
    if added:
        report.phases.append(PhaseReport("baseline", added))
    return added


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
