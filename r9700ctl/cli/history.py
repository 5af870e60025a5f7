"""`r9700ctl history`: the validate runs on record, and a figure's trend per node and GPU."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from r9700ctl.agent import schemas
from r9700ctl.cli.app import Application

if TYPE_CHECKING:
    from rich.table import Table

    from r9700ctl.history.queries import RunRow, Series

SPARKS = "▁▂▃▄▅▆▇█"


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
@click.option(
    "--json",
    "json_path",
    metavar="PATH",
    help="Also write what is shown as JSON (schema r9700ctl.history/1); '-' for standard output "
    "(the tables then go to standard error).",
)
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
    from r9700ctl.cli.options import check_json_path, write_json_output
    from r9700ctl.errors import BadInput
    from r9700ctl.history import queries
    from r9700ctl.history.store import open_history
    from r9700ctl.report import print_plain

    if metric is not None and check is None:
        raise BadInput(
            what="--metric needs --check", hint="e.g. --check collective.allreduce --metric busbw_256MiB"
        )
    check_json_path(json_path)
    console = app.console(stderr=json_path == "-")
    with open_history(create=False) as store:
        if check is None:
            runs = queries.list_runs(store, node=node, limit=limit)
            if node is not None and not runs:
                queries.trend(store, "-", node=node)  # raises the one-line "no run of that node"
            document = {
                "schema": schemas.HISTORY,
                "database": str(store.path),
                "runs": [r.to_dict() for r in runs],
            }
            tables = [_runs_table(runs)]
            footer = f"{len(runs)} run(s) shown from {store.path}"
        else:
            series = queries.trend(store, check, node=node, metric=metric, limit=limit)
            document = {
                "schema": schemas.HISTORY,
                "database": str(store.path),
                "check": check,
                "series": [s.to_dict() for s in series],
            }
            tables = _trend_tables(series)
            footer = "\n".join(_spark_line(s) for s in series)
    for table in tables:
        print_plain(console, table) if app.plain else console.print(table)
    console.print(footer, markup=False, highlight=False, soft_wrap=True)
    write_json_output(json_path, document)


def _short_time(started: str) -> str:
    """2026-12-02T20:05:59Z -> 2026-12-02 20:05 (UTC, as stored)."""
    return started[:16].replace("T", " ")


def _runs_table(runs: list[RunRow]) -> Table:
    from rich import box
    from rich.table import Table

    caption = "a run id starts with its UTC start time"
    table = Table(
        box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True, caption=caption, caption_justify="left"
    )
    for name in ("run", "level", "status", "runtime", "version"):
        table.add_column(name, no_wrap=True)
    for name in ("nodes", "baselines"):
        table.add_column(name, overflow="fold", ratio=1, min_width=len(name))  # a header never folds
    for run in runs:
        nodes = ", ".join(run.nodes) if len(run.nodes) <= 4 else f"{len(run.nodes)} nodes"
        table.add_row(
            run.id,
            run.level,
            run.status,
            run.runtime,
            run.toolkit_version,
            nodes,
            ", ".join(run.baselines) or "-",
        )
    return table


def _trend_tables(series: list[Series]) -> list[Table]:
    """One small table per node, GPU, check and metric: each run's figure, oldest first."""
    from rich import box
    from rich.table import Table

    tables = []
    for entry in series:
        title = f"{entry.node}  {entry.gpu or 'node'}  {entry.check}  {entry.metric}"
        table = Table(box=box.SIMPLE_HEAD, pad_edge=False, title=title, title_justify="left")
        for name in ("started (UTC)", "run", "level", "as", "value", "status"):
            table.add_column(name, no_wrap=True, justify="right" if name == "value" else "left")
        for point in entry.points:
            if point.value is not None:
                value = f"{point.value:.4g} {point.unit}".strip()
            else:
                value = f"{point.value_text or '-'} {point.unit}".strip()
            table.add_row(
                _short_time(point.started), point.run_id, point.level, point.subject, value, point.status
            )
        tables.append(table)
    return tables


def sparkline(numbers: list[float]) -> str:
    """▁▃█ for the figures between their own minimum and maximum (flat: all ▄)."""
    if not numbers:
        return ""
    low, high = min(numbers), max(numbers)
    if high == low:
        return SPARKS[3] * len(numbers)
    return "".join(SPARKS[round((n - low) / (high - low) * (len(SPARKS) - 1))] for n in numbers)


def _spark_line(series: Series) -> str:
    numbers = series.numbers
    where = f"{series.node} {series.gpu or 'node'} {series.check} {series.metric}"
    if not numbers:
        return f"{where}: no numeric figure"
    unit = next((p.unit for p in series.points if p.value is not None), "")
    text = f"{where}: {sparkline(numbers)} {numbers[0]:.4g} -> {numbers[-1]:.4g} {unit}".rstrip()
    change = series.change
    return f"{text} ({change:+.1%} over {len(numbers)} runs)" if change is not None else text
