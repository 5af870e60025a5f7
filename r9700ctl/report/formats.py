"""`r9700ctl validate` reports as HTML, Prometheus textfile and JUnit XML.

Pure functions: each takes a validate report dict, one node's (r9700ctl.validate/1) or the
fleet's (r9700ctl.validate-fleet/1), and returns text (`render(name, ...)` picks one by name).
Both schemas are first normalised to a list of NodeReport (node, status, results), worst first.
A fleet node that gave no report (unreachable, agent could not run) becomes one ERROR result
`node.report`, so every format shows it; fleet-wide findings become the pseudo-node "fleet".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from r9700ctl.agent import schemas
from r9700ctl.agent.metrics import missing_code
from r9700ctl.agent.result import ERROR, SEVERITY, STATUSES, overall

NODE_SCHEMA = schemas.VALIDATE
FLEET_SCHEMA = schemas.VALIDATE_FLEET


class ReportFormatError(ValueError):
    """The document is not a validate report this module knows."""


@dataclass
class NodeReport:
    """One node's part of a report, as every format shows it."""

    node: str
    status: str
    results: list[dict[str, Any]]
    started: str = ""
    environment: dict[str, Any] = field(default_factory=dict)


def _severity(status: Any) -> int:
    return SEVERITY.get(str(status), SEVERITY[ERROR])


def _worst_first(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(results, key=lambda r: -_severity(r.get("status")))  # stable: agent order within a status


def _known(status: Any) -> str:
    return str(status) if status in STATUSES else ERROR


def _node_from_agent_report(report: dict[str, Any], node: str = "") -> NodeReport:
    results = [r for r in report.get("results") or [] if isinstance(r, dict)]
    return NodeReport(
        node=str(report.get("node") or node or "localhost"),
        status=_known(report.get("status")),
        results=_worst_first(results),
        started=str(report.get("started") or ""),
        environment=report.get("environment") if isinstance(report.get("environment"), dict) else {},
    )


def nodes_of(report: dict[str, Any]) -> list[NodeReport]:
    """Either schema as a list of nodes, worst node first."""
    schema = report.get("schema") if isinstance(report, dict) else None
    if schema == NODE_SCHEMA:
        return [_node_from_agent_report(report)]
    if schema != FLEET_SCHEMA:
        raise ReportFormatError(f"not a validate report (schema {schema!r})")
    nodes: list[NodeReport] = []
    for entry in report.get("nodes") or []:
        host = str(entry.get("host") or "?")
        if isinstance(entry.get("report"), dict):
            nodes.append(_node_from_agent_report(entry["report"], host))
            nodes[-1].node = host  # the inventory name is what the fleet table and alerts use
            continue
        missing = {
            "id": "node.report",
            "subject": "node",
            "status": ERROR,
            "hint": f"{entry.get('status', 'NO_REPORT')}: {entry.get('error') or 'no report'}",
            "code": missing_code(entry),
        }
        nodes.append(NodeReport(host, ERROR, [missing], started=str(report.get("started") or "")))
    fleet = [r for r in (report.get("fleet") or {}).get("results") or [] if isinstance(r, dict)]
    if fleet:
        statuses = [_known(r.get("status")) for r in fleet]
        nodes.append(
            NodeReport("fleet", overall(statuses), _worst_first(fleet), str(report.get("started") or ""))
        )
    return sorted(nodes, key=lambda n: -_severity(n.status))


def _number(value: Any) -> float | None:
    """A finite number, or None (strings, booleans and NaN are not figures)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _value_text(result: dict[str, Any]) -> str:
    value = result.get("value")
    if value is None or value == "":
        return ""
    number = _number(value)
    text = f"{number:.4g}" if number is not None and isinstance(value, float) else str(value)
    return f"{text} {result.get('unit') or ''}".strip()


# --- HTML ----------------------------------------------------------------------------------------


def render_html(report: dict[str, Any], trends: dict | None = None) -> str:
    """A self-contained page with charts (r9700ctl/report/html); `trends` from the history."""
    from r9700ctl.report import html

    try:
        return html.render(report, trends)
    except ValueError as exc:
        raise ReportFormatError(str(exc)) from None


# --- Prometheus ----------------------------------------------------------------------------------


def render_prometheus(report: dict[str, Any], now: float | None = None) -> str:
    """node_exporter textfile format: the r9700_* metrics (r9700ctl/agent/metrics.py)."""
    from r9700ctl.agent import metrics

    try:
        return metrics.render(report, now)
    except ValueError as exc:
        raise ReportFormatError(str(exc)) from None


# --- JUnit ---------------------------------------------------------------------------------------


def render_junit(report: dict[str, Any]) -> str:
    """A testsuite per node, a testcase per result: FAIL failure, ERROR error, INCONCLUSIVE and SKIP
    skipped (INCONCLUSIVE with type "INCONCLUSIVE" and the reason: nothing was judged, nothing broke)."""
    from junitparser import Error, Failure, JUnitXml, Skipped, TestCase, TestSuite

    document = JUnitXml("r9700ctl validate")
    for node in nodes_of(report):
        suite = TestSuite(node.node)
        if node.started:
            suite.timestamp = node.started
        for result in node.results:
            case = TestCase(str(result.get("subject") or ""), classname=str(result.get("id") or ""))
            verdict = _known(result.get("status"))
            code = str(result.get("code") or "")
            # The reason code leads the message, as in the table: what CI filters key on.
            hint = (
                f"{code}: {result.get('hint') or ''}".rstrip(": ") if code else str(result.get("hint") or "")
            )
            detail = "; ".join(
                f"{label}: {text}"
                for label, text in (
                    ("status", verdict),
                    ("code", code),
                    ("value", _value_text(result)),
                    ("threshold", str(result.get("threshold") or "")),
                )
                if text
            )
            if verdict == "FAIL":
                case.result = [Failure(hint or detail, "FAIL")]
            elif verdict == "ERROR":
                case.result = [Error(hint or detail, verdict)]
            elif verdict == "INCONCLUSIVE":
                case.result = [Skipped(f"INCONCLUSIVE: {hint or detail}", "INCONCLUSIVE")]
            elif verdict == "SKIP":
                case.result = [Skipped(hint or "skipped")]
            case.system_out = f"{detail}\n{hint}".strip() if hint else detail
            suite.add_testcase(case)
        suite.update_statistics()
        document.add_testsuite(suite)
    document.update_statistics()
    return '<?xml version="1.0" encoding="utf-8"?>\n' + document.tostring().decode("utf-8") + "\n"


RENDERERS = {"html": render_html, "prom": render_prometheus, "junit": render_junit}


def render(name: str, report: dict[str, Any], trends: dict | None = None) -> str:
    """The report in format `name` (html, prom, junit); the HTML page draws `trends` as sparklines."""
    if name == "html":
        return render_html(report, trends=trends or {})
    return RENDERERS[name](report)
