"""`r9700ctl history` as text: the runs on record, or a check's figures per node and GPU over time.

The JSON document is the view's own (`HistoryView.to_dict()`, schema r9700ctl.history/1).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.table import Table

    from r9700ctl.history.queries import RunRow, Series

SPARKS = "▁▂▃▄▅▆▇█"


def short_time(started: str) -> str:
    """2026-12-02T20:05:59Z -> 2026-12-02 20:05 (UTC, as stored)."""
    return started[:16].replace("T", " ")


def runs_table(runs: list[RunRow]) -> Table:
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


def trend_tables(series: list[Series]) -> list[Table]:
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
                short_time(point.started), point.run_id, point.level, point.subject, value, point.status
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


def spark_line(series: Series) -> str:
    numbers = series.numbers
    where = f"{series.node} {series.gpu or 'node'} {series.check} {series.metric}"
    if not numbers:
        return f"{where}: no numeric figure"
    unit = next((p.unit for p in series.points if p.value is not None), "")
    text = f"{where}: {sparkline(numbers)} {numbers[0]:.4g} -> {numbers[-1]:.4g} {unit}".rstrip()
    change = series.change
    return f"{text} ({change:+.1%} over {len(numbers)} runs)" if change is not None else text
