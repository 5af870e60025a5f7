"""Reading the history: the runs, and one check's figures over time per node and GPU."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from r9700ctl.agent import schemas
from r9700ctl.errors import BadInput
from r9700ctl.history.store import History, open_history


@dataclass
class RunRow:
    id: str
    started: str
    toolkit_version: str
    level: str
    runtime: str
    scope: str
    status: str
    nodes: list[str] = field(default_factory=list)
    baselines: list[str] = field(default_factory=list)  # names saved from this run

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Point:
    run_id: str
    started: str
    level: str
    subject: str  # what that run called the GPU (gpu0), which may change between runs
    value: float | None
    value_text: str | None
    unit: str
    status: str


@dataclass
class Series:
    """One check and metric on one node and GPU (by serial or PCI address), oldest first."""

    node: str
    gpu: str
    check: str
    metric: str
    points: list[Point] = field(default_factory=list)

    @property
    def numbers(self) -> list[float]:
        return [p.value for p in self.points if p.value is not None]

    @property
    def change(self) -> float | None:
        """Last against first figure, as a fraction (None without two figures or a zero first)."""
        numbers = self.numbers
        if len(numbers) < 2 or numbers[0] == 0:
            return None
        return numbers[-1] / numbers[0] - 1

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "change": self.change}


def list_runs(history: History, *, node: str | None = None, limit: int = 20) -> list[RunRow]:
    """The newest runs first (of one node when given)."""
    where, parameters = (
        ("", ())
        if node is None
        else (
            "WHERE id IN (SELECT run_id FROM run_nodes WHERE node = ?)",
            (node,),
        )
    )
    rows = history.query(
        "SELECT id, started, toolkit_version, level, runtime, scope, status FROM runs "
        f"{where} ORDER BY started DESC, id DESC LIMIT ?",
        (*parameters, limit),
    )
    runs = [RunRow(**dict(row)) for row in rows]
    for run in runs:
        run.nodes = [
            r["node"]
            for r in history.query("SELECT node FROM run_nodes WHERE run_id = ? ORDER BY node", (run.id,))
        ]
        run.baselines = [
            f"{r['name']} ({r['node']})"
            for r in history.query(
                "SELECT name, node FROM baselines WHERE run_id = ? ORDER BY name", (run.id,)
            )
        ]
    return runs


def trend(
    history: History, check: str, *, node: str | None = None, metric: str | None = None, limit: int = 20
) -> list[Series]:
    """Every figure of `check` (an id, or a family such as hostbw) per node, GPU and metric,
    over the newest `limit` runs of each node; BadInput naming the known checks when none match."""
    conditions = ["(check_id = ? OR check_id LIKE ?)"]
    parameters: list[Any] = [check, f"{check}.%"]
    if node is not None:
        conditions.append("results.node = ?")
        parameters.append(node)
    if metric is not None:
        conditions.append("metric = ?")
        parameters.append(metric)
    rows = history.query(
        "SELECT results.node, gpu, subject, check_id, metric, value, value_text, unit, results.status, "
        "runs.id AS run_id, runs.started, runs.level FROM results JOIN runs ON runs.id = results.run_id "
        f"WHERE {' AND '.join(conditions)} ORDER BY runs.started, runs.id",
        tuple(parameters),
    )
    if not rows:
        raise BadInput(what=_nothing_recorded(history, check, node, metric), where=str(history.path))
    series: dict[tuple[str, str, str, str], Series] = {}
    for row in rows:
        key = (row["node"], row["gpu"] or row["subject"], row["check_id"], row["metric"])
        entry = series.setdefault(key, Series(*key))
        entry.points.append(
            Point(
                row["run_id"],
                row["started"],
                row["level"],
                row["subject"],
                row["value"],
                row["value_text"],
                row["unit"],
                row["status"],
            )
        )
    for entry in series.values():
        entry.points = entry.points[-limit:]
    return sorted(series.values(), key=lambda s: (s.node, s.check, s.metric, s.gpu))


def _nothing_recorded(history: History, check: str, node: str | None, metric: str | None) -> str:
    known = [
        r["check_id"]
        for r in history.query(
            "SELECT DISTINCT check_id FROM results WHERE (? IS NULL OR node = ?) ORDER BY check_id",
            (node, node),
        )
    ]
    nodes = [r["node"] for r in history.query("SELECT DISTINCT node FROM run_nodes ORDER BY node")]
    if node is not None and node not in nodes:
        return f"--node {node}: no run of that node in the history (nodes: {', '.join(nodes) or 'none'})"
    what = f"--check {check}" + (f" --metric {metric}" if metric else "")
    listed = ", ".join(known[:40]) + (" ..." if len(known) > 40 else "")
    return f"{what}: nothing recorded{f' for {node}' if node else ''} (checks: {listed or 'none'})"


def figure_trends(
    history: History, reports: Mapping[str, Mapping[str, Any]], *, limit: int = 20
) -> dict[tuple[str, str, str, str], list[float]]:
    """Each numeric result of these node reports -> its values in the history, oldest first,
    matched by check, metric and GPU identity; keyed (node, check, subject as now, metric)."""
    from r9700ctl.history.record import gpu_keys, identity_subject

    out: dict[tuple[str, str, str, str], list[float]] = {}
    for node, report in reports.items():
        earlier: dict[tuple[str, str, str], list[float]] = {}
        for row in history.query(
            "SELECT check_id, gpu, subject, metric, value FROM results JOIN runs ON runs.id = results.run_id "
            "WHERE results.node = ? AND value IS NOT NULL ORDER BY runs.started, runs.id",
            (node,),
        ):
            earlier.setdefault((row["check_id"], row["gpu"] or row["subject"], row["metric"]), []).append(
                row["value"]
            )
        keys = gpu_keys(report)
        for result in report.get("results") or []:
            if not isinstance(result, Mapping):
                continue
            subject, metric = str(result.get("subject") or ""), str(result.get("metric") or "")
            identity = identity_subject(subject, keys) or subject
            values = earlier.get((str(result.get("id")), identity, metric))
            if values:
                out[(node, str(result.get("id")), subject, metric)] = values[-limit:]
    return out


@dataclass
class HistoryView:
    """What `r9700ctl history` shows: the runs on record, or one check's series per node and GPU."""

    database: Path
    runs: list[RunRow] = field(default_factory=list)
    check: str | None = None  # set: `series` holds that check's figures
    series: list[Series] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        document: dict[str, Any] = {"schema": schemas.HISTORY, "database": str(self.database)}
        if self.check is None:
            return {**document, "runs": [r.to_dict() for r in self.runs]}
        return {**document, "check": self.check, "series": [s.to_dict() for s in self.series]}


def show_runs(*, node: str | None = None, limit: int = 20, path: Path | None = None) -> HistoryView:
    """The newest runs (of `node`); no history yet, or no run of that node, is one line (exit 3/64)."""
    with open_history(path, create=False) as store:
        runs = list_runs(store, node=node, limit=limit)
        if node is not None and not runs:
            trend(store, "-", node=node)  # raises the one-line "no run of that node"
        return HistoryView(database=store.path, runs=runs)


def show_trend(
    check: str,
    *,
    node: str | None = None,
    metric: str | None = None,
    limit: int = 20,
    path: Path | None = None,
) -> HistoryView:
    """One check's (or family's) figures over time per node, GPU and metric."""
    with open_history(path, create=False) as store:
        series = trend(store, check, node=node, metric=metric, limit=limit)
        return HistoryView(database=store.path, check=check, series=series)
