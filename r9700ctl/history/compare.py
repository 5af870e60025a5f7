"""Baselines from the history: `--save-baseline NAME` and `--compare NAME|last`, per node and GPU.

The rule is the agent's own three-gate regression check (r9700ctl/agent/baseline.py: tiered
drop, p75/p25 separation, adjacent busbw sizes, INCONCLUSIVE guards), applied to figures read
back from the database instead of a JSON file. Figures are matched by check, metric and GPU
identity (serial or PCI address), so a card that moved to another slot or torch index is still
compared with itself. A node without a reference gets one INCONCLUSIVE `baseline.coverage`
result saying why: a comparison that compared nothing never passes.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from r9700ctl.agent import baseline
from r9700ctl.agent.result import ERROR, FAIL, INCONCLUSIVE, CheckResult
from r9700ctl.clock import utc_text
from r9700ctl.errors import BadInput
from r9700ctl.history.record import gpu_keys, identity_subject
from r9700ctl.history.store import History

LAST = "last"
# A node whose run failed or could not run is not a healthy reference.
UNFIT_FOR_BASELINE = (FAIL, ERROR)


@dataclass
class Reference:
    """A node's figures from one earlier run, keyed by (check, GPU identity or subject, metric)."""

    name: str
    run_id: str
    node: str
    started: str
    level: str
    figures: dict[tuple[str, str, str], baseline.Figure] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)

    def source(self, this_node: str) -> dict[str, Any]:
        return {
            "history": self.name,
            "run_id": self.run_id,
            "node": self.node,
            "this_node": this_node,
            "level": self.level,
            "started": self.started,
        }


def check_name(name: str) -> str:
    """A baseline name: letters, digits, . _ - (it is typed and shown); 'last' is taken."""
    if not name or not all(c.isalnum() or c in "._-" for c in name) or len(name) > 64:
        raise BadInput(
            what=f"--save-baseline {name!r}: a baseline name uses letters, digits, '.', '_' or '-' "
            "(at most 64)",
            hint="e.g. --save-baseline golden",
        )
    if name == LAST:
        raise BadInput(what="'last' means the previous run and cannot be a saved baseline's name")
    return name


def names(history: History) -> dict[str, list[str]]:
    """Saved baselines: name -> the nodes it has a run for."""
    out: dict[str, list[str]] = {}
    for row in history.query("SELECT name, node FROM baselines ORDER BY name, node"):
        out.setdefault(row["name"], []).append(row["node"])
    return out


def require_known(history: History, name: str) -> None:
    """`--compare NAME` for a name never saved is bad input, found before anything runs."""
    if name == LAST:
        return
    known = names(history)
    if name not in known:
        listed = ", ".join(sorted(known)) or "none saved yet"
        raise BadInput(
            what=f"--compare {name}: no baseline of that name in the history (saved: {listed})",
            where=str(history.path),
            hint="save one with --save-baseline NAME, or use --compare last",
        )


def save(history: History, name: str, run_id: str, nodes: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """Point NAME at run_id for every healthy node of it; returns (saved, refused with reasons)."""
    from datetime import datetime, timezone

    saved, refused = [], []
    now = utc_text(datetime.now(timezone.utc))
    with history.write() as db:
        for node, status in nodes.items():
            if status in UNFIT_FOR_BASELINE:
                refused.append(f"{node} ({status})")
                continue
            db.execute(
                "INSERT OR REPLACE INTO baselines (name, node, run_id, saved) VALUES (?, ?, ?, ?)",
                (name, node, run_id, now),
            )
            saved.append(node)
    return saved, refused


def reference(history: History, name: str, node: str, *, level: str, before_run: str) -> Reference | None:
    """The node's figures from baseline NAME, or for 'last' from its latest earlier run
    (the same level first: other levels time other windows)."""
    if name == LAST:
        rows = history.query(
            "SELECT r.id, r.started, r.level FROM runs r JOIN run_nodes n ON n.run_id = r.id "
            "WHERE n.node = ? AND r.id != ? AND EXISTS "
            "(SELECT 1 FROM figures f WHERE f.run_id = r.id AND f.node = n.node) "
            "ORDER BY (r.level = ?) DESC, r.started DESC, r.id DESC LIMIT 1",
            (node, before_run, level),
        )
    else:
        rows = history.query(
            "SELECT r.id, r.started, r.level FROM baselines b JOIN runs r ON r.id = b.run_id "
            "WHERE b.name = ? AND b.node = ?",
            (name, node),
        )
    if not rows:
        return None
    run = rows[0]
    found = Reference(name, run["id"], node, run["started"], run["level"])
    for row in history.query(
        "SELECT check_id, subject, gpu, metric, kind, value, unit, size_bytes, samples FROM figures "
        "WHERE run_id = ? AND node = ?",
        (run["id"], node),
    ):
        figure = baseline.Figure(
            check=row["check_id"],
            subject=row["gpu"] or row["subject"],
            metric=row["metric"],
            kind=row["kind"],
            value=float(row["value"]),
            unit=row["unit"],
            samples=tuple(float(x) for x in json.loads(row["samples"] or "[]")),
            size_bytes=row["size_bytes"],
        )
        found.figures[figure.key] = figure
    environment = history.query(
        "SELECT environment FROM run_nodes WHERE run_id = ? AND node = ?", (run["id"], node)
    )
    if environment:
        found.environment = json.loads(environment[0]["environment"] or "{}")
    return found


FigureKey = tuple[str, str, str]


def current_figures(report: Mapping[str, Any]) -> tuple[dict[FigureKey, baseline.Figure], dict[str, str]]:
    """This run's figures keyed by GPU identity, and identity -> the subject this run calls it."""
    keys = gpu_keys(report)
    by_identity: dict[FigureKey, baseline.Figure] = {}
    subjects: dict[str, str] = {}
    for figure in baseline.figures(report.get("results") or []).values():
        identity = identity_subject(figure.subject, keys) or figure.subject
        subjects[identity] = figure.subject
        moved = dataclasses.replace(figure, subject=identity)
        by_identity[moved.key] = moved
    return by_identity, subjects


def compare_report(
    report: Mapping[str, Any], ref: Reference, node: str, config: Mapping[str, Any] | None = None
) -> list[CheckResult]:
    """Every figure of this node's report against the reference's, then `baseline.coverage`."""
    cfg = config or comparison_config(report)
    now, subjects = current_figures(report)
    comparisons = baseline.compare(ref.figures, now, cfg)
    environment = report.get("environment") if isinstance(report.get("environment"), dict) else {}
    differences = baseline.environment_differences(ref.environment, environment)
    source = ref.source(node)
    results = []
    for comparison in comparisons:
        result = baseline.comparison_result(comparison, differences, source)
        identity = comparison.current.subject
        result.evidence["gpu"] = identity
        result.subject = subjects.get(identity, identity)
        if result.subject != identity:  # the hint names the card as this run does, and its identity
            result.hint = result.hint.replace(identity, f"{result.subject} ({identity})")
        results.append(result)
    missing = [k for k in ref.figures if k not in now]
    new = [k for k in now if k not in ref.figures]
    results.append(
        baseline.coverage_result(
            len(comparisons), missing, new, differences, source, str(report.get("level"))
        )
    )
    return results


def no_reference(name: str, node: str, level: str) -> CheckResult:
    """The one result for a node the history has nothing to compare with."""
    why = (
        f"no earlier run of {node} with figures in the history"
        if name == LAST
        else f"baseline {name!r} has no run of {node} (save one with --save-baseline {name})"
    )
    return CheckResult(
        id="baseline.coverage",
        subject="node",
        status=INCONCLUSIVE,
        metric="figures_compared",
        value=0,
        unit="figures",
        threshold=">= 1 figure in common with the baseline",
        hint=f"{why}: nothing was compared",
        evidence={"baseline_report": {"history": name, "this_node": node, "level": level}},
        code="BASELINE_NOT_FOUND",
    )


def unavailable(name: str, node: str, why: str) -> CheckResult:
    """The history could not be read: the comparison did not happen, and says so."""
    result = no_reference(name, node, "")
    result.hint = f"the history could not be read ({why}): nothing was compared"
    result.code = "HISTORY_UNREADABLE"
    return result


def comparison_config(report: Mapping[str, Any]) -> dict[str, Any]:
    """The 3-gate's settings for this node's thresholds section (thresholds.yaml baseline.*, the one
    source; the controller reads the YAML the agent gets as JSON)."""
    from r9700ctl.agent.thresholds import resolve
    from r9700ctl.agentpack import data_document

    model = str(report.get("model") or "")
    values = resolve([model] if model else [], document=data_document("thresholds")).values
    return baseline.config_from_thresholds(values)
