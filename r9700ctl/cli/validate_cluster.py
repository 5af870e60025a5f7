"""`r9700ctl validate INVENTORY --cluster`: parse, call r9700ctl.cluster, render, exit."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from r9700ctl.errors import BadInput

if TYPE_CHECKING:
    from r9700ctl.cli.output import Output
    from r9700ctl.history.runs import HistoryPlan


def not_for_cluster(options: dict[str, Any], given: set[str]) -> list[str]:
    """The options given that mean nothing for a cluster run, as flags: the agent's own (--local's),
    its GPU count, --allow-busy and --level (the phases have no levels; a level given on the command
    line is refused, R9700CTL_VALIDATE_LEVEL, a standing preference, is not)."""
    from r9700ctl.validate_local import AGENT_FLAGS, LOCAL_ONLY

    flags = {**{key: AGENT_FLAGS[key] for key in LOCAL_ONLY}, "expected_gpus": "--expected-gpus"}
    found = [flag for key, flag in flags.items() if options.get(key) is not None]
    if options.get("allow_busy"):
        found.append("--allow-busy")
    if "level" in given:
        found.append("--level")
    return found


def given_on_the_command_line() -> set[str]:
    """The validate parameters the user typed (not defaults, not environment variables)."""
    import click
    from click.core import ParameterSource

    ctx = click.get_current_context()
    return {name for name in ctx.params if ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE}


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

    options, plan = asked.options, asked.plan
    refused = not_for_cluster(options, given_on_the_command_line())
    if refused:  # one line, before the inventory is read or any host touched
        verb = "does" if len(refused) == 1 else "do"
        raise BadInput(
            what=f"{', '.join(refused)} {verb} not apply to --cluster",
            hint=f"drop {' and '.join(refused)}: --cluster runs its own phases, not the agent's checks",
        )
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
