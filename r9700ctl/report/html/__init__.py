"""The HTML report: one self-contained page (inline CSS and SVG, no script, nothing fetched).

Fleet summary first (nodes worst first, toolkit version, level, where the thresholds came from,
why there is no fleet comparison), then per node: its verdicts with hints, the charts of
charts.CHARTS (P2P heatmap, bandwidth against transfer size, scaling, load timelines, and
whatever is registered next), each figure's trend from the history as a sparkline, the GPUs and
the environment as tables. `render(document, trends)` takes either validate schema; `trends`
maps (node, check, subject, metric) to the figure's earlier values, oldest first.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from r9700ctl.agent import schemas
from r9700ctl.agent.result import ERROR, PASS, QUIET, SEVERITY, STATUSES, overall
from r9700ctl.report.html import charts, tables
from r9700ctl.report.html import power_charts as power_charts  # registers its charts

TrendKey = tuple[str, str, str, str]  # node, check, subject, metric
MIN_TREND_POINTS = 2


@dataclass
class NodeView:
    name: str
    status: str
    results: list[dict[str, Any]]
    report: Mapping[str, Any] | None = None
    error: str = ""
    charts: list[charts.Chart] = field(default_factory=list)
    tables: list[tables.Table] = field(default_factory=list)
    trends: dict[int, str] = field(default_factory=dict)  # id() of a result -> sparkline SVG

    def trend(self, result: Mapping[str, Any]) -> str:
        return self.trends.get(id(result), "")

    @property
    def counts(self) -> dict[str, int]:
        found = [str(r.get("status")) for r in self.results]
        return {s: found.count(s) for s in sorted(set(found), key=lambda s: -SEVERITY.get(s, 4))}

    @property
    def thresholds(self) -> str:
        report = self.report or {}
        model, reason = report.get("model"), report.get("model_reason")
        return f"{model}: {reason}" if model and reason else str(model or "—")

    @property
    def worst(self) -> dict[str, Any] | None:
        bad = [r for r in self.results if r.get("status") not in QUIET]
        return bad[0] if bad else None


def _known(status: Any) -> str:
    return str(status) if status in STATUSES else ERROR


def _worst_first(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(results, key=lambda r: -SEVERITY.get(_known(r.get("status")), 4))


def value_text(result: Mapping[str, Any]) -> str:
    value = result.get("value")
    if value is None or value == "":
        return ""
    number = f"{value:.4g}" if isinstance(value, float) and math.isfinite(value) else tables.text(value)
    return f"{number} {result.get('unit') or ''}".strip()


def node_views(document: Mapping[str, Any]) -> list[NodeView]:
    """Either schema as node views, worst node first."""
    schema = document.get("schema")
    if schema == schemas.VALIDATE:
        entries = [(str(document.get("node") or "localhost"), document, "", document.get("status"))]
    elif schema == schemas.VALIDATE_FLEET:
        entries = [
            (str(e.get("host") or "?"), e.get("report"), str(e.get("error") or ""), e.get("status"))
            for e in document.get("nodes") or []
            if isinstance(e, Mapping)
        ]
    else:
        raise ValueError(f"not a validate report (schema {schema!r})")
    views = []
    for name, report, error, status in entries:
        if isinstance(report, Mapping):
            results = [r for r in report.get("results") or [] if isinstance(r, dict)]
            views.append(NodeView(name, _known(report.get("status")), _worst_first(results), report))
        else:
            missing = {"id": "node.report", "subject": "node", "status": ERROR, "hint": f"{status}: {error}"}
            views.append(NodeView(name, ERROR, [missing], None, error=f"{status}: {error}"))
    return sorted(views, key=lambda v: -SEVERITY[v.status])


def _add_details(view: NodeView, trends: Mapping[TrendKey, list[float]]) -> None:
    if view.report is None:
        return
    view.charts = charts.charts_for(view.report)
    gpus = [g for g in view.report.get("gpus") or [] if isinstance(g, Mapping)]
    gpu_table = tables.gpu_table(gpus)
    environment = view.report.get("environment")
    view.tables = ([gpu_table] if gpu_table else []) + tables.environment_tables(
        environment if isinstance(environment, Mapping) else {}
    )
    for position, result in enumerate(view.results):
        key = (view.name, str(result.get("id")), str(result.get("subject")), str(result.get("metric") or ""))
        values = trends.get(key) or []
        if len(values) >= MIN_TREND_POINTS:
            view.trends[id(result)] = charts.sparkline(values, f"trend-{view.name}-{position}")


def render(document: Mapping[str, Any], trends: Mapping[TrendKey, list[float]] | None = None) -> str:
    """The page for a validate report (either schema), escaped throughout (autoescape on)."""
    from jinja2 import Environment, FileSystemLoader, StrictUndefined

    from r9700ctl import __version__, paths

    views = node_views(document)
    for view in views:
        _add_details(view, trends or {})
    fleet = document.get("fleet") if isinstance(document.get("fleet"), Mapping) else {}
    fleet_results = _worst_first([r for r in fleet.get("results") or [] if isinstance(r, dict)])
    # A document that states no status and lists no node judged nothing: INCONCLUSIVE, never PASS.
    status = _known(document.get("status")) if document.get("status") else overall([v.status for v in views])
    env = Environment(
        loader=FileSystemLoader(str(paths.content_dir("templates"))),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    return env.get_template("report.html.j2").render(
        schema=document.get("schema"),
        toolkit_version=document.get("toolkit_version") or __version__,
        level=document.get("level") or "",
        started=document.get("started") or "",
        status=status,
        exit_code=document.get("exit_code"),
        nodes=views,
        fleet_note=str(fleet.get("note") or ""),
        fleet_results=[r for r in fleet_results if r.get("status") != PASS],
        fleet_compared=fleet.get("compared_metrics"),
        is_fleet=document.get("schema") == schemas.VALIDATE_FLEET,
        value_text=value_text,
        notes=[str(n) for n in document.get("notes") or []],
    )
