"""`r9700ctl validate INVENTORY --cluster`: parse, call r9700ctl.cluster, render, exit."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from r9700ctl.errors import BadInput

if TYPE_CHECKING:
    from r9700ctl.cli.output import Output
    from r9700ctl.history.runs import HistoryPlan


@dataclass(frozen=True)
class InventoryRun:
    """What `validate INVENTORY` hands its two runs (the fleet's, cli/validate.py, and --cluster's):
    the inventory with its group and limit, validate's other options, the history plan and the
    report formats to write."""

    inventory: Path
    group: str
    limit: str | None
    options: dict[str, Any]
    plan: HistoryPlan
    formats: dict[str, Path]


def validate_cluster(out: Output, asked: InventoryRun) -> None:
    from r9700ctl.cli.output import write_output
    from r9700ctl.cluster.service import ClusterRequest
    from r9700ctl.cluster.service import validate_cluster as run
    from r9700ctl.report.cluster import culprit_lines, matrix_lines, phases_table
    from r9700ctl.report.cluster_formats import render
    from r9700ctl.validate_local import AGENT_FLAGS, LOCAL_ONLY

    # Options of validate that mean nothing for a cluster run: the agent's own (--local's), its GPU
    # count and --allow-busy.
    options, plan = asked.options, asked.plan
    not_for_cluster = {**{key: AGENT_FLAGS[key] for key in LOCAL_ONLY}, "expected_gpus": "--expected-gpus"}
    for key, flag in not_for_cluster.items():
        if options.get(key) is not None:
            raise BadInput(what=f"{flag} does not apply to --cluster", hint=f"drop {flag}")
    if options.get("allow_busy"):
        raise BadInput(what="--allow-busy does not apply to --cluster", hint="drop --allow-busy")
    request = ClusterRequest(
        inventory=asked.inventory,
        group=asked.group,
        limit=asked.limit,
        runtime=str(options.get("runtime") or "auto"),
        history=plan,
    )
    with out.progress(int(options.get("verbose") or 0)) as progress:
        report = run(request, progress=progress)
    out.table(phases_table(report))
    lines = culprit_lines(report)
    for phase in report.phases:
        lines += matrix_lines(phase.matrix, f"{phase.name}: node x node, the slower way")
    out.lines(lines)
    flags = {"html": "--html", "prom": "--prom", "junit": "--junit"}
    for name, path in asked.formats.items():
        write_output(flags[name], path, render(name, report))
    out.line(f"cluster: {report.status} (exit {report.exit_code}); phase results in {report.reports_dir}")
    for note in plan.notes:
        out.note(note)
    out.finish(report.to_dict(), report.exit_code)
