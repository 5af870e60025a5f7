"""Reports: what a run found, as JSON documents, terminal tables and progress lines.

One module per command (provision.py; validate and doctor add theirs) builds the command's
document and tables; the helpers here are shared: atomic JSON writing, the schema tag,
durations and timestamps written the same way everywhere.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from r9700ctl.agent.atomic import write_atomic

if TYPE_CHECKING:
    from rich.console import Console


def schema(command: str, version: int = 1) -> str:
    """The `schema` value of a command's JSON document (fields are only added within a version)."""
    return f"r9700ctl.{command}/{version}"


def write_json(path: Path | str, document: Any) -> Path:
    """Write `document` to `path` atomically (a .tmp file, then rename): readers never see half a file."""
    return write_atomic(path, json.dumps(document, indent=2, sort_keys=False, default=str) + "\n")


def print_plain(console: Console, renderable: Any) -> None:
    """Print a table without the padding that fills the terminal: plain lines end at their text."""
    with console.capture() as captured:
        console.print(renderable)
    for line in captured.get().splitlines():
        console.print(line.rstrip(), markup=False, highlight=False, soft_wrap=True)


def timestamp(moment: datetime) -> str:
    """ISO 8601 in UTC with a Z, to the second: 2026-12-02T13:13:14Z."""
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def seconds(value: float) -> str:
    """A duration for people: 0.4 s, 12.3 s, 4 min 05 s."""
    if value < 60:
        return f"{value:.1f} s"
    minutes, secs = divmod(round(value), 60)
    return f"{minutes} min {secs:02d} s"
