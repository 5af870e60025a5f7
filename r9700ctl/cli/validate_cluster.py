"""`r9700ctl validate INVENTORY --cluster`: parse, call r9700ctl.cluster, render, exit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from r9700ctl.cli.app import Application
from r9700ctl.cli.validate import LOCAL_ONLY
from r9700ctl.errors import BadInput

if TYPE_CHECKING:
    from r9700ctl.history.runs import HistoryPlan

# Options of validate that mean nothing for a cluster run: the agent's own (--local's) and its GPU count.
NOT_FOR_CLUSTER = {**LOCAL_ONLY, "expected_gpus": "--expected-gpus"}


def validate_cluster(
    app: Application, inventory: Path, group: str, limit: str | None, options: dict, plan: HistoryPlan
) -> None:
    for key, flag in NOT_FOR_CLUSTER.items():
        if options.get(key) is not None:
            raise BadInput(what=f"{flag} does not apply to --cluster", hint=f"drop {flag}")
    if options.get("allow_busy"):
        raise BadInput(what="--allow-busy does not apply to --cluster", hint="drop --allow-busy")
    plan.check()
    from r9700ctl.cluster.service import ClusterRequest
    from r9700ctl.cluster.service import validate_cluster as run
    from r9700ctl.report import print_plain, write_json
    from r9700ctl.report.cluster import culprit_lines, matrix_lines, phases_table
    from r9700ctl.report.progress import renderer as progress_renderer

    to_stdout = bool(options.get("json_stdout"))
    console = app.console(stderr=to_stdout)
    renderer = progress_renderer(
        console, plain=app.plain or to_stdout, verbosity=int(options.get("verbose") or 0)
    )
    request = ClusterRequest(
        inventory=inventory, group=group, limit=limit, runtime=str(options.get("runtime") or "auto")
    )
    with renderer:
        report = run(request, progress=renderer)
    from r9700ctl.report.cluster_formats import record_history

    record_history(report, plan)  # the comparison's verdicts join the report before it is shown
    table = phases_table(report)
    print_plain(console, table) if app.plain else console.print(table)
    lines = culprit_lines(report)
    for phase in report.phases:
        lines += matrix_lines(phase.matrix, f"{phase.name}: node x node, the slower way")
    for line in lines:
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    document = report.to_dict()
    json_path = options.get("json_path")
    if isinstance(json_path, Path):
        write_json(json_path, document)
    _write_formats(report, options, plan)
    if to_stdout:
        click.echo(json.dumps(document, indent=2))
    console.print(
        f"cluster: {report.status} (exit {report.exit_code}); phase results in {report.reports_dir}",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    for note in plan.notes:
        click.echo(note, err=True)
    click.get_current_context().exit(report.exit_code)


def _write_formats(report, options: dict, plan: HistoryPlan) -> None:
    """--html (heatmaps per phase), --junit and --prom (through the validate-fleet shape)."""
    from r9700ctl.report.cluster_formats import write_formats

    write_formats(report, {k: options.get(k) for k in ("html_path", "junit_path", "prom_path")})
