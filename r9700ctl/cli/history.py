"""`r9700ctl history`: the validate runs on record, and a figure's trend per node and GPU."""

from __future__ import annotations

import click

from r9700ctl.agent import schemas
from r9700ctl.cli.app import Application
from r9700ctl.cli.output import Output, json_option


@click.command(
    epilog="""\b
Examples:
  r9700ctl history                                  the newest runs, with their baselines
  r9700ctl history --node node03                    the runs that included node03
  r9700ctl history --node node03 --check hostbw.h2d host->GPU GB/s per GPU over time
  r9700ctl history --check collective.allreduce --metric busbw_256MiB
  r9700ctl history --check p2p --json trend.json     every P2P figure, as JSON
\b
Exit codes: 0 shown; 3 no history yet, or the database is damaged (one line with its
path); 64 an unknown node or check (the known ones are listed), or a file r9700ctl did
not create (left as it was)."""
)
@click.option("--node", "-n", metavar="NODE", help="Only runs of this node (inventory name, or hostname).")
@click.option(
    "--check",
    "-c",
    metavar="CHECK",
    help="Show this check's figures over time per node and GPU: an id (hostbw.h2d) or a family (hostbw).",
)
@click.option("--metric", "-m", metavar="METRIC", help="With --check: only this metric (e.g. busbw_256MiB).")
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=20,
    show_default=True,
    help="How many runs (per node and GPU with --check).",
)
@json_option("what is shown", schemas.HISTORY)
@click.pass_obj
def history(
    app: Application,
    node: str | None,
    check: str | None,
    metric: str | None,
    limit: int,
    json_path: str | None,
) -> None:
    """List the validate runs on record, or show one check's figures over time.

    Every `r9700ctl validate INVENTORY` and `validate --local` run is recorded in
    ~/.local/state/r9700ctl/history.db (SQLite; env var R9700CTL_HISTORY names another file):
    time, toolkit version, level, runtime, and per node and GPU every check's figure, unit
    and status. GPUs are followed by serial number (or PCI address where no tool reports
    one), so a card that moved slots keeps its trend. `validate --save-baseline NAME` marks
    a run as a baseline; `validate --compare NAME|last` holds a new run to it.
    """
    from r9700ctl.errors import BadInput
    from r9700ctl.history import queries
    from r9700ctl.report import history as text

    if metric is not None and check is None:
        raise BadInput(
            what="--metric needs --check", hint="e.g. --check collective.allreduce --metric busbw_256MiB"
        )
    out = Output(app, json_path)
    if check is None:
        shown = queries.show_runs(node=node, limit=limit)
        out.table(text.runs_table(shown.runs))
        out.line(f"{len(shown.runs)} run(s) shown from {shown.database}")
    else:
        shown = queries.show_trend(check, node=node, metric=metric, limit=limit)
        for table in text.trend_tables(shown.series):
            out.table(table)
        out.line("\n".join(text.spark_line(s) for s in shown.series))
    out.finish(shown.to_dict())
