"""The reason-code catalogue (r9700ctl/data/codes.yaml), read on either side: one record per code.

Every verdict that is not PASS carries a code (CheckResult.code), as DCGM's errors do
(NVIDIA/DCGM dcgmlib/dcgm_errors.h): a stable name an operator, a dashboard or a runbook keys on,
with one record saying what it means, the likely cause, the next step, what to do with the node
(the action class) and the public source. The catalogue is append-only: a code once shipped never
changes meaning and is never reused.

The agent reads the catalogue as the JSON the controller packs (agent/datafiles.py), the
controller reads the YAML source in place (through agentpack, its reader); `hint(code, said)` is a
verdict's hint: what was found, with its figures, then the code's next step, so the text of a next
step is written once.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any

from r9700ctl.agent import datafiles

FIELDS = ("meaning", "cause", "next", "action", "category", "source")
# What an operator does with the node, DCGM's action classes (monitor, isolate, triage, configure,
# drain and reset) plus "retest" (the figure could not be judged: run it again) and "none" (a note).
ACTIONS = ("none", "monitor", "retest", "configure", "triage", "isolate", "drain-reset")
CODE_SHAPE = re.compile(r"^[A-Z][A-Z0-9]*(_[A-Z0-9]+)*$")


class CatalogueError(ValueError):
    """codes.yaml breaks its own rules (a record lacking a field, an unknown action, a bad name)."""


@dataclass(frozen=True)
class Code:
    """One record of the catalogue."""

    code: str
    meaning: str
    cause: str
    next: str
    action: str
    category: str
    source: str
    known_issue: str = ""  # the known issue (data/manifest.yaml known_issues) this code reports, if any

    def to_dict(self) -> dict[str, str]:
        return {
            "code": self.code,
            "meaning": self.meaning,
            "cause": self.cause,
            "next": self.next,
            "action": self.action,
            "category": self.category,
            "source": self.source,
            "known_issue": self.known_issue,
        }


_parsed: dict[int, dict[str, Code]] = {}


def records(document: Any) -> dict[str, Code]:
    """The records of a codes document (codes.yaml as parsed); CatalogueError on a broken one."""
    if not isinstance(document, dict) or not isinstance(document.get("codes"), dict):
        raise CatalogueError("codes.yaml: expected a top-level 'codes:' mapping")
    found: dict[str, Code] = {}
    for name, entry in document["codes"].items():
        if not CODE_SHAPE.match(str(name)):
            raise CatalogueError(f"codes.yaml: {name!r} is not a code (UPPER_CASE_WITH_UNDERSCORES)")
        entry = entry if isinstance(entry, dict) else {}
        missing = [f for f in FIELDS if not str(entry.get(f) or "").strip()]
        if missing:
            raise CatalogueError(f"codes.yaml: {name} lacks {', '.join(missing)}")
        if entry["action"] not in ACTIONS:
            raise CatalogueError(
                f"codes.yaml: {name} has action {entry['action']!r}; one of {', '.join(ACTIONS)}"
            )
        found[name] = Code(
            str(name),
            *(" ".join(str(entry[f]).split()) for f in FIELDS),
            known_issue=str(entry.get("known_issue") or ""),
        )
    return found


def _document() -> Any:
    """codes.yaml as the agent reads it, as JSON: packed beside the agent on a node, and kept in
    r9700ctl/data/codes.json on the controller (agentpack writes it from the YAML; a test keeps the
    two equal), so both sides read the catalogue with the standard library alone."""
    return datafiles.load_data("codes")


def catalogue() -> dict[str, Code]:
    """Every code by name (read once)."""
    document = _document()
    key = id(document)
    if key not in _parsed:
        _parsed.clear()
        _parsed[key] = records(document)
    return _parsed[key]


def record(code: str) -> Code:
    """The record of `code`; KeyError for a code the catalogue lacks (a bug the tests catch)."""
    return catalogue()[code]


def nearest(code: str, limit: int = 3) -> list[str]:
    """The catalogued codes closest to a mistyped or partial one (case ignored)."""
    wanted = code.strip().upper()
    names = list(catalogue())
    contains = [n for n in names if wanted and wanted in n]
    close = difflib.get_close_matches(wanted, names, n=limit, cutoff=0.5)
    return list(dict.fromkeys(close + contains))[:limit]


class _Fill(dict):
    """Figures for a next step's {placeholders}; one not given reads <name>."""

    def __missing__(self, key: str) -> str:
        return f"<{key}>"


def next_step(code: str, **fill: Any) -> str:
    """The code's next step, its {placeholders} (a port, a GPU) filled in where given."""
    return record(code).next.format_map(_Fill(fill))


def hint(code: str, said: str = "", **fill: Any) -> str:
    """A verdict's hint: what was found (`said`, with the figures of the case), then the code's next step."""
    step = next_step(code, **fill)
    return f"{said}; {step}" if said else step
