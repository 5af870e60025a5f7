"""`validate --cluster` in the history, through the validate-fleet shape the history already reads.

The fleet shape: each node's own verdicts (facts about it, isolation blaming it) form its report;
every verdict about a pair or the whole cluster goes to the pseudo-node `cluster@GROUP` (a name no
inventory host can have: '@' is no host name character), so a pair's figures keep one history.
JUnit and Prometheus read the same shape (r9700ctl/report/cluster_formats.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from r9700ctl.agent import schemas
from r9700ctl.agent.result import CheckResult, overall

if TYPE_CHECKING:
    from r9700ctl.cluster.model import ClusterReport
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
            "schema": schemas.VALIDATE,
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
        "schema": schemas.VALIDATE_FLEET,
        "toolkit_version": __version__,
        "level": LEVEL,
        "started": report.started,
        "status": report.status,
        "exit_code": report.exit_code,
        "nodes": [{"host": n, "status": r["status"], "report": r} for n, r in reports.items()],
        "fleet": {"results": [], "compared_metrics": 0, "note": "validate --cluster"},
        "runtime": "host",
    }


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
