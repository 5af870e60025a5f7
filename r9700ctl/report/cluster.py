"""`validate --cluster` as the terminal shows it: a table per phase, the culprit, the findings, the matrix.

Pure renderers over a ClusterReport (r9700ctl/cluster/model.py); the HTML page and the formats that
read validate-fleet documents (JUnit, Prometheus, the history) are in cluster_formats.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from r9700ctl.agent.result import FAIL, PASS, WARN, worst_first

if TYPE_CHECKING:
    from rich.table import Table

    from r9700ctl.cluster.model import ClusterReport, Matrix


def phases_table(report: ClusterReport) -> Table:
    from rich import box
    from rich.table import Table
    from rich.text import Text

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("phase", no_wrap=True)
    table.add_column("status", no_wrap=True, min_width=6)
    table.add_column("time", justify="right", no_wrap=True)
    table.add_column("pass/warn/\nfail/other", justify="right", no_wrap=True)
    table.add_column("worst finding", overflow="fold", ratio=1, min_width=20)
    for phase in report.phases:
        statuses = [r.status for r in phase.results]
        named = [statuses.count(status) for status in (PASS, WARN, FAIL)]
        counts = "/".join(str(n) for n in [*named, len(statuses) - sum(named)])
        table.add_row(
            phase.name,
            phase.status,
            f"{phase.seconds:.0f} s" if phase.ran else "-",
            counts if phase.ran else "-",
            Text(_worst(phase) if phase.ran else phase.note),
        )
    return table


def _worst(phase) -> str:
    bad = worst_first(phase.results)
    if not bad:
        return f"{len(phase.results)} verdict(s), all PASS"
    first = bad[0]
    return f"{first.id} {first.subject}: {first.status} {first.code}".rstrip()


def culprit_lines(report: ClusterReport) -> list[str]:
    """What to act on first, then every finding that is not PASS (worst first)."""
    lines = []
    culprit = report.culprit()
    if culprit is not None:
        what = {"node": "node", "link": "link", "pair": "pair", "cluster": "cluster"}[culprit["kind"]]
        lines.append(
            f"culprit: {what} {culprit['subject']}, found by the {culprit['phase']} phase: "
            f"{culprit['status']} {culprit['code']}: {culprit['said']}"
        )
        if culprit["next"]:
            lines.append(f"next: {culprit['next']}")
    for result in worst_first(report.results):
        value = f" {result.value:.4g} {result.unit}" if isinstance(result.value, float) else ""
        lines.append(f"{result.status} {result.code} {result.id} {result.subject}:{value} {result.hint}")
    return lines


def matrix_lines(matrix: Matrix | None, title: str) -> list[str]:
    """A node x node matrix as text rows (the HTML report draws it as a heatmap)."""
    if matrix is None or not matrix.values:
        return []
    nodes = sorted(matrix.values)
    width = max(8, *(len(n) for n in nodes))
    lines = [f"{title} ({matrix.unit})", " " * width + "".join(f"{n:>{width}}" for n in nodes)]
    for a in nodes:
        cells = []
        for b in nodes:
            value = matrix.values.get(a, {}).get(b)
            cells.append(f"{'-':>{width}}" if a == b or value is None else f"{value:>{width}.3g}")
        lines.append(f"{a:<{width}}" + "".join(cells))
    return lines
