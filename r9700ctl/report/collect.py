"""`r9700ctl collect` as text: a row per host (files recorded, what was not) and where to go next."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.table import Table

    from r9700ctl.collect import CollectReport


def summary_table(report: CollectReport) -> Table:
    from rich import box
    from rich.table import Table
    from rich.text import Text

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("host", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("files", justify="right", no_wrap=True)
    table.add_column("not recorded", overflow="fold", ratio=1)
    for host in report.hosts:
        if host.status == "COLLECTED":
            missing = ", ".join(sorted(host.missing)) or "-"
        else:
            missing = host.error or host.status.lower()
        table.add_row(host.host, host.status, str(len(host.files)), Text(missing))
    return table


def closing_line(report: CollectReport) -> str:
    out = report.out_dir
    if not any(host.files for host in report.hosts):
        # Nothing recorded anywhere: doctor --bundle would only say so again, host by host.
        return (
            f"no file recorded on any host (MISSING.txt in {out}/<host>/ says why); "
            "`r9700ctl doctor INVENTORY` checks reachability and sudo"
        )
    return (
        f"bundles in {out}/<host>/ (MISSING.txt says why a file is missing); "
        f"next: r9700ctl doctor --bundle {out}"
    )
