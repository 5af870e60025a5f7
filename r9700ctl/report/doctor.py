"""`r9700ctl doctor` as text: the hosts' checks as a table, or each bundle's findings as lines.

The JSON documents are the reports' own (`DoctorReport.to_dict()`, `FleetBundleReport.to_dict()`,
schema r9700ctl.doctor/1).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from r9700ctl.agent.result import FAIL, NOT_JUDGED, PASS, QUIET, WARN

if TYPE_CHECKING:
    from rich.table import Table

    from r9700ctl.bundle import BundleReport, FleetBundleReport
    from r9700ctl.doctor import DoctorReport


def hosts_table(report: DoctorReport, verbose: bool) -> Table:
    """A row per problem (every check with `verbose`); a host with none gets one summary row."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for column in ("host", "check", "status", "code"):  # code: the reason code (r9700ctl explain CODE)
        table.add_column(column, no_wrap=True)
    table.add_column("detail", overflow="fold", ratio=3)
    table.add_column("fix", overflow="fold", ratio=2)
    for host in report.hosts:
        shown = [c for c in host.checks if verbose or c.status not in QUIET]
        if not shown:  # the summary row says what ran: skips alone pass nothing
            passed = sum(1 for c in host.checks if c.status == PASS)
            skipped = len(host.checks) - passed
            table.add_row(
                host.name,
                "all",
                host.status,
                "",
                f"{passed} checks passed" + (f", {skipped} skipped" if skipped else ""),
                "",
            )
        for check in shown:
            # Text(): details quote tool output, whose "[...]" must not be read as markup
            table.add_row(host.name, check.id, check.status, check.code, Text(check.detail), Text(check.hint))
    return table


def known_issue_lines(report: DoctorReport) -> list[str]:
    """Per host, the known issues of its GPUs with the release it has or would get, and the workaround."""
    lines = []
    for host in report.hosts:
        for item in host.resolved.get("known_issues") or []:
            release = host.resolved.get("rocm_version") or "?"
            lines.append(
                f"{host.name}: known issue {item['id']} (ROCm {release}): {item['title']}; "
                f"workaround {item['workaround']} ({item['in_force']}); {item['source']}"
            )
    return lines


def hosts_summary(report: DoctorReport) -> str:
    unreached = [h.name for h in report.hosts if not h.reached]
    failed = [h.name for h in report.hosts if h.reached and h.status in (FAIL, *NOT_JUDGED)]
    ready = [h for h in report.hosts if h.reached and h.name not in failed]
    warned = sum(1 for h in ready if h.status == WARN)
    parts = [
        f"{len(report.hosts)} host(s): {len(ready)} ready" + (f" ({warned} with warnings)" if warned else "")
    ]
    if failed:
        parts.append(f"{len(failed)} failed a check ({', '.join(failed)})")
    if unreached:
        parts.append(f"{len(unreached)} could not be reached or logged in to ({', '.join(unreached)})")
    return "; ".join(parts) + f"; exit {report.exit_code}"


def bundles_lines(fleet: FleetBundleReport, verbose: bool) -> list[str]:
    """Each bundle's lines, a blank line between bundles, and a summary when there are several."""
    lines: list[str] = []
    for index, bundle in enumerate(fleet.bundles):
        if index:
            lines.append("")
        lines += bundle_lines(bundle, verbose)
    if len(fleet.bundles) > 1:
        lines += ["", fleet.summary()]
    return lines


def bundle_lines(bundle: BundleReport, verbose: bool) -> list[str]:
    from r9700ctl.bundle import lines as evidence_of
    from r9700ctl.bundle import severity
    from r9700ctl.bundle.model import INFO

    lines = [f"bundle {bundle.path} (node {bundle.node})"]
    lines += [f"  {line}" for line in bundle.overview_lines()]
    shown = [f for f in bundle.findings if verbose or severity(f) != INFO]
    hidden = len(bundle.findings) - len(shown)
    if not bundle.findings:
        lines.append("  no problems found in the files present")
    for finding in shown:
        lines.append(f"  {severity(finding):<5} {finding.detail}")
        evidence = evidence_of(finding)
        for line in evidence[:3]:
            lines.append(f"        evidence: {line.location()}" + (f": {line.text}" if line.text else ""))
        if len(evidence) > 3:
            lines.append(f"        evidence: {len(evidence) - 3} more line(s) in --json")
        if finding.hint:
            lines.append(f"        fix: {finding.hint}")
        if finding.code:
            lines.append(f"        code: {finding.code}")
    if hidden:
        lines.append(f"  {hidden} note(s) not shown (--verbose shows them)")
    lines += [f"  {item.detail}" for item in bundle.not_judged]
    lines.append(f"  {bundle.summary()}")
    return lines
