"""`r9700ctl validate` as text: the fleet's table per node, its findings, the history's comparisons.

The agent prints its own table for `--local` (r9700ctl.agent.report); what the controller adds
to it, and the whole of the fleet's text, is here. The JSON documents are the agent's report
(r9700ctl.validate/1) and `FleetReport.to_dict()` (r9700ctl.validate-fleet/1).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from r9700ctl.agent.result import SEVERITY

if TYPE_CHECKING:
    from rich.table import Table

    from r9700ctl.agent.result import CheckResult
    from r9700ctl.validate import FleetReport, NodeOutcome


def nodes_table(report: FleetReport) -> Table:
    """One row per node: status, where the agent ran, counts, and its worst finding with the hint."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    # The image's full name (70 characters) would crowd node, status and finding out of an
    # 80-column table: the column says where the agent ran, image_lines() which image.
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("node", no_wrap=True, min_width=max([4, *(len(n.host) for n in report.nodes)]))
    table.add_column("status", no_wrap=True, min_width=max([6, *(len(n.status) for n in report.nodes)]))
    table.add_column("runtime", no_wrap=True)
    table.add_column("pass/warn/\nfail/inconclusive", justify="right", no_wrap=True)
    table.add_column("worst finding", overflow="fold", ratio=1, min_width=20)
    for node in report.nodes:
        counts = node.counts
        numbers = (
            f"{counts['passed']}/{counts['warn']}/{counts['fail']}/{counts['inconclusive']}"
            if node.report
            else "-"
        )
        table.add_row(node.host, node.status, node.runtime or "-", numbers, Text(worst_text(node)))
    return table


def image_lines(report: FleetReport) -> list[str]:
    """Which container image judged which nodes (the table's runtime column says only 'container')."""
    by_image: dict[str, list[str]] = {}
    for node in report.nodes:
        if node.runtime == "container" and node.image:
            by_image.setdefault(node.image, []).append(node.host)
    return [f"{', '.join(hosts)}: the agent ran in {image}" for image, hosts in by_image.items()]


def worst_text(node: NodeOutcome) -> str:
    if node.report is None:
        return node.error
    finding = node.worst_finding()
    if finding is None:
        return "-"
    text = f"{finding.get('id')} {finding.get('subject')}: {finding.get('status')}"
    if finding.get("code"):
        text += f" {finding['code']}"
    if finding.get("value") not in (None, ""):
        text += f" {finding.get('value')} {finding.get('unit') or ''}".rstrip()
    return f"{text}; {finding['hint']}" if finding.get("hint") else text


def fleet_lines(report: FleetReport) -> list[str]:
    """The fleet judge's findings worst first (its PASS rows stay in the JSON), or why there are none."""
    if report.fleet.note:
        return [report.fleet.note]
    findings = sorted(
        (r for r in report.fleet.results if r.status != "PASS"), key=lambda r: -SEVERITY[r.status]
    )
    if not findings:
        return [f"fleet: no outlier among {report.fleet.compared} compared figure(s)"]
    return [
        f"{r.status} {r.code} {r.id} {r.subject}: {r.hint}"
        if r.code
        else f"{r.status} {r.id} {r.subject}: {r.hint}"
        for r in findings
    ]


def comparison_lines(comparisons: Mapping[str, list[CheckResult]]) -> list[str]:
    """One line per comparison that did not pass, then how many figures were compared per node."""
    lines = []
    for node, results in comparisons.items():
        for r in results:
            if r.status != "PASS" and r.id != "baseline.coverage":
                lines.append(f"{node} {r.id} {r.subject}: {r.status}; {r.hint}")
        coverage = next((r for r in results if r.id == "baseline.coverage"), None)
        if coverage is not None:
            text = f"{node} baseline.coverage: {coverage.status}, {coverage.value} figure(s) compared"
            lines.append(f"{text}; {coverage.hint}" if coverage.hint else text)
    return lines


def fleet_closing(report: FleetReport) -> str:
    closing = f"fleet: {report.status} (exit {report.exit_code})"
    if any(node.report for node in report.nodes):
        return closing + f"; reports in {report.reports_dir}/<host>.json"
    # No node wrote one: pointing at the directory would send the user to nothing.
    return closing + "; no node wrote a report (`r9700ctl doctor INVENTORY` checks reachability and sudo)"


def fleet_text(report: FleetReport) -> list[str]:
    """What follows the fleet's table, in order."""
    return image_lines(report) + fleet_lines(report) + comparison_lines(report.comparisons)


def local_lines(report: Mapping[str, Any], comparisons: Mapping[str, list[CheckResult]]) -> list[str]:
    """--local: below the agent's own table, the history's comparisons and the node's new verdict."""
    if not comparisons:
        return []
    node = str(report.get("node") or "localhost")
    return [
        *comparison_lines(comparisons),
        f"node {node} with the history comparison: {report['status']} (exit {report['exit_code']})",
    ]
