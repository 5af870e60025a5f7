"""The agent's report: the JSON document `r9700ctl.validate/1` and the plain-text table.

JSON fields are only ever added within a schema version (docs/architecture.md, Contracts).
The file is written to `.tmp` and renamed, and a stale report is removed before a run starts,
so an old PASS cannot outlive a run that failed to finish. The table needs no rich: plain
columns, grouped by family.
"""

from __future__ import annotations

import contextlib
import math
import textwrap
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from r9700ctl.agent import atomic, schemas
from r9700ctl.agent.result import SEVERITY, CheckResult, exit_code_for, overall

SCHEMA = schemas.VALIDATE
EXIT_MEANING = {
    0: "all good",
    1: "warnings only",
    2: "something failed",
    3: "could not run everything",
    4: "inconclusive: something could not be judged",
}


def build(
    *,
    node: str,
    level: str,
    started: str,
    duration_s: float,
    environment: dict[str, Any],
    gpus: Iterable[dict[str, Any]],
    results: list[CheckResult],
    model: str = "",
    model_reason: str = "",
    journal: str = "",
    steps: list[dict[str, Any]] | None = None,
    notes: list[str] | None = None,
    banners: list[str] | None = None,
) -> dict[str, Any]:
    """The report document; `banners` are what the run must say before any table (a busy GPU)."""
    return {
        "schema": SCHEMA,
        "node": node,
        "level": level,
        "started": started,
        "duration_s": round(duration_s, 3),
        "environment": environment,
        "gpus": list(gpus),
        "model": model,
        "model_reason": model_reason,
        "results": [r.to_dict() for r in results],
        **verdict([r.status for r in results]),
        "journal": journal,
        "steps": steps or [],
        "notes": notes or [],
        "banners": banners or [],
    }


def verdict(statuses: list[str]) -> dict[str, Any]:
    """The report's status, exit_code and counts from its results' statuses (also used when the
    controller adds results to a node's report, e.g. a comparison with the history).

    SKIP next to a judged result counts as that result; nothing judged is INCONCLUSIVE."""
    status = overall(statuses)
    return {
        "status": status,
        "exit_code": exit_code_for(statuses),
        "counts": {s: statuses.count(s) for s in sorted(set(statuses), key=lambda s: -SEVERITY[s])},
    }


def _json_safe(value: Any) -> Any:
    """NaN and infinities are not JSON: write them as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def write_json(path: Path, report: dict[str, Any]) -> None:
    """Write atomically (r9700ctl.agent.atomic)."""
    atomic.write_json(path, _json_safe(report))


def remove_stale(path: Path) -> None:
    """Delete an old report before running, so it cannot be mistaken for this run's."""
    for candidate in (path, path.with_name(path.name + ".tmp")):
        with contextlib.suppress(FileNotFoundError):
            candidate.unlink()


def _value_text(result: dict[str, Any]) -> str:
    value = result.get("value")
    if value is None:
        return "-"
    if isinstance(value, float):
        text = f"{value:.3g}" if abs(value) < 100 else f"{value:.1f}"
    else:
        text = str(value)
    unit = result.get("unit") or ""
    return f"{text} {unit}".strip()


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def render_table(report: dict[str, Any], width: int = 100) -> str:
    """Per family: check, subject, status, value, threshold; long thresholds and hints below; verdict last."""
    rows = report.get("results", [])
    lines = [
        f"r9700ctl validate: node {report.get('node')}, level {report.get('level')}, "
        f"{len(report.get('gpus', []))} GPU(s), thresholds: {report.get('model') or '-'}"
    ]
    for banner in report.get("banners") or []:
        lines.extend(textwrap.wrap(f"!! {banner}", width=width, subsequent_indent="   "))
    id_width = min(34, max([len(str(r.get("id", ""))) for r in rows] + [12]))
    subject_width = min(14, max([len(str(r.get("subject", ""))) for r in rows] + [7]))
    header = f"  {'CHECK':<{id_width}} {'SUBJECT':<{subject_width}} {'STATUS':<12} {'VALUE':<16} THRESHOLD"
    room = max(16, width - (id_width + subject_width + 34))
    families: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        families.setdefault(str(row.get("id", "")).split(".")[0], []).append(row)
    for family, members in families.items():
        lines.append("")
        lines.append(f"{family}")
        lines.append(header)
        for row in members:
            threshold = str(row.get("threshold") or "")
            inline = threshold if len(threshold) <= room else ""
            lines.append(
                f"  {_clip(str(row.get('id')), id_width):<{id_width}} "
                f"{_clip(str(row.get('subject')), subject_width):<{subject_width}} "
                f"{row.get('status', ''):<12} {_clip(_value_text(row), 16):<16} {inline}".rstrip()
            )
            extra = []
            if threshold and not inline:
                extra.append(f"threshold: {threshold}")
            if row.get("hint") or row.get("code"):
                # The reason code first: what `r9700ctl explain CODE` and dashboards key on.
                code = f"{row['code']}: " if row.get("code") else ""
                extra.append(f"{code}{row.get('hint') or ''}".rstrip(": "))
            for text in extra:
                lines.extend(f"      {piece}" for piece in textwrap.wrap(text, width=max(40, width - 6)))
    counts = report.get("counts", {})
    summary = ", ".join(f"{n} {s}" for s, n in counts.items()) or "no results"
    code = report.get("exit_code", 3)
    lines.append("")
    lines.append(
        f"node {report.get('node')}: {report.get('status')} (exit {code}: {EXIT_MEANING.get(code, '')}) - "
        f"{summary} in {report.get('duration_s', 0):.1f} s"
    )
    return "\n".join(lines) + "\n"
