"""The provision report as text: the summary table per host and the lines after it.

Per host: status, Ansible's counts (as in its PLAY RECAP: `ok` includes the changed tasks),
duration, the ROCm release and the first error. The JSON document is the outcome's own
(`ProvisionOutcome.to_dict()`, schema r9700ctl.provision/1).

Host statuses: OK (nothing changed), CHANGED, FAILED (a task failed), UNREACHABLE (no
connection), INTERRUPTED (Ctrl-C came while it was mid-way), NOT_RUN (ansible never started
on it, e.g. the playbook stopped first).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from r9700ctl.ansible_run import CHANGED, FAILED, INTERRUPTED, NOT_RUN, OK, UNREACHABLE, HostResult
from r9700ctl.provision import RoleFacts, totals
from r9700ctl.report import seconds
from r9700ctl.report.progress import display_task

if TYPE_CHECKING:
    from rich.table import Table

    from r9700ctl.provision import ProvisionOutcome

STATUS_STYLES = {
    OK: "green",
    CHANGED: "yellow",
    FAILED: "bold red",
    UNREACHABLE: "bold magenta",
    INTERRUPTED: "bold magenta",
    NOT_RUN: "dim",
}


def summary_table(outcome: ProvisionOutcome, plain: bool, width: int = 100) -> Table:
    """One row per host (plain output: no colour).

    The error is cut to what `width` leaves: a table too wide for the terminal would make rich
    squeeze the numbers instead (the full error is printed below the table).
    """
    from rich.markup import escape
    from rich.table import Table

    rows = [
        [
            host.host,
            host.status,
            str(host.ok),
            str(host.changed),
            str(host.failed),
            str(host.unreachable),
            str(host.skipped),
            seconds(host.duration_s),
            rocm_release(host),
            host.first_error or "-",
        ]
        for host in outcome.hosts
    ]
    headers = ["HOST", "STATUS", "OK", "CHANGED", "FAILED", "UNREACH", "SKIPPED", "TIME", "ROCM", "ERROR"]
    widths = [max(len(header), *(len(row[i]) for row in rows)) for i, header in enumerate(headers)]
    # Columns are two spaces apart; no box, so a row is one greppable line in a log too.
    room = max(len(headers[-1]), width - sum(widths[:-1]) - 2 * (len(headers) - 1) - 1)
    table = Table(box=None, pad_edge=False, header_style="" if plain else "bold")
    for index, header in enumerate(headers):
        table.add_column(header, no_wrap=True, justify="left" if index in (0, 1, 8, 9) else "right")
    for row in rows:
        if len(row[-1]) > room:
            row[-1] = row[-1][: room - 1] + "…"
        cells = [escape(cell) for cell in row]  # "[Errno 2]" in an error is text, not markup
        if not plain:
            cells[1] = f"[{STATUS_STYLES[row[1]]}]{row[1]}[/]"
        table.add_row(*cells)
    return table


def rocm_release(host: HostResult) -> str:
    """The ROCm release the host has after the run: rocm-core's upstream version ("7.1.1"), or "-"."""
    after = RoleFacts.of(host).versions.get("after")
    version = str((after or {}).get("rocm-core") or "") if isinstance(after, dict) else ""
    match = re.match(r"(\d+\.\d+\.\d+)", version)
    return match.group(1) if match else "-"


def closing_lines(outcome: ProvisionOutcome) -> list[str]:
    """What to read after the table: failures in full, reboots, interruptions, where the artifacts are."""
    run = outcome.run
    count = totals(outcome.hosts)
    lines = [
        f"{count['hosts']} host(s) in {seconds(run.duration_s)}: {count[OK]} ok, {count[CHANGED]} changed, "
        f"{count[FAILED]} failed, {count[UNREACHABLE]} unreachable"
        + (f", {count[INTERRUPTED]} interrupted" if count[INTERRUPTED] else "")
        + (f", {count[NOT_RUN]} not run" if count[NOT_RUN] else "")
        + (" (check mode: nothing was changed)" if outcome.options.check else "")
    ]
    for host in outcome.hosts:
        for task in host.errors[:1]:
            if task.unreachable:  # the connection failed, whichever task met it ("Gathering Facts")
                lines.append(
                    f"{host.host}: {UNREACHABLE}: {host.first_error} "
                    "(`r9700ctl doctor INVENTORY` names the cause and the fix)"
                )
            else:
                lines.append(f"{host.host}: {FAILED} at '{display_task(task.task)}': {task.message}")
    lines += known_issue_lines(outcome.hosts)
    for host in outcome.hosts:
        reason = RoleFacts.of(host).converged.get("reason")
        if reason and not host.errors:
            lines.append(f"{host.host}: {reason}")
    for host in outcome.hosts:
        p2p = RoleFacts.of(host).p2p
        if p2p.get("reason") and not host.errors:
            lines.append(f"{host.host}: PCIe P2P {p2p['reason']}")
    for host in outcome.hosts:
        containers = RoleFacts.of(host).containers
        if containers and not host.errors:
            engine, image = containers.get("engine"), containers.get("image")
            lines.append(f"{host.host}: {engine}; image {image}")
            lines.append(f"{host.host}: container smoke check: {containers.get('smoke')}")
    for host in outcome.hosts:
        if host.reboot_pending:
            why = f" ({'; '.join(host.reboot_reasons)})" if host.reboot_reasons else ""
            lines.append(f"{host.host}: reboot pending{why}")
    if outcome.reboot_pending:
        lines.append(
            f"reboot {', '.join(outcome.reboot_pending)}, then run provision again: it should change nothing"
        )
    if run.canceled:
        left = [
            f"{h.host} (in '{h.current_task}')" if h.current_task else h.host for h in run.interrupted_hosts
        ]
        lines.append(
            f"interrupted: left mid-way: {', '.join(left) or 'none'}"
            " (run provision again to finish them; every step is safe to repeat)"
        )
    if outcome.exit_code != 0:
        lines.append(f"run artifacts: {run.run_dir}")
    return lines


def known_issue_lines(hosts: list[HostResult]) -> list[str]:
    """Per host: a release `auto` skipped for a known issue, and each workaround provision applied
    (an explicitly chosen affected release is said here with the workaround in force)."""
    lines = []
    for host in hosts:
        facts = RoleFacts.of(host)
        if "skipped" in facts.rocm_choice:
            lines.append(f"{host.host}: {facts.rocm_choice}")
        for item in facts.known_issues:
            if item.get("blocking") or str(item.get("in_force", "")).startswith("applied"):
                lines.append(
                    f"{host.host}: known issue {item.get('id')}: {item.get('title')}; workaround "
                    f"{item.get('in_force')}; see {item.get('source')}"
                )
    return lines
