"""The reason-code catalogue on the controller: `r9700ctl explain CODE` and docs/codes.md.

The records and their loader are the agent's (r9700ctl/agent/codes.py: the agent fills its hints
from them on a node); here they are looked up by name, near misses suggested, and the whole
catalogue rendered as Markdown (docs/codes.md is that output; a test keeps the two equal).
"""

from __future__ import annotations

import difflib

from r9700ctl.agent import schemas
from r9700ctl.agent.codes import ACTIONS, Code, catalogue, next_step

DOC_PATH = "docs/codes.md"
SCHEMA = schemas.CODES

__all__ = [
    "ACTIONS",
    "DOC_PATH",
    "SCHEMA",
    "Code",
    "explain_lines",
    "load",
    "nearest",
    "record",
    "render_markdown",
]


def load() -> dict[str, Code]:
    """Every code by name."""
    return catalogue()


def record(code: str) -> Code:
    """The record of `code` (KeyError for an unknown one: a bug, caught by the tests)."""
    return load()[code]


def nearest(code: str, limit: int = 3) -> list[str]:
    """The catalogued codes closest to a mistyped or partial one (case ignored)."""
    wanted = code.strip().upper()
    names = list(load())
    contains = [n for n in names if wanted and wanted in n]
    close = difflib.get_close_matches(wanted, names, n=limit, cutoff=0.5)
    return list(dict.fromkeys(close + contains))[:limit]


def explain_lines(entry: Code) -> list[str]:
    """The record as `r9700ctl explain` prints it."""
    lines = [
        f"{entry.code}: {entry.meaning}",
        f"  likely cause: {entry.cause}",
        f"  next step:    {next_step(entry.code)}",
        f"  action:       {entry.action} ({entry.category})",
        f"  source:       {entry.source}",
    ]
    if entry.known_issue:
        lines.append(f"  known issue:  {entry.known_issue} (r9700ctl known-issues -v)")
    return lines


def render_markdown() -> str:
    """docs/codes.md: every code, by category, with its record."""
    codes = load()
    lines = [
        "# Reason codes",
        "",
        "<!-- Generated from r9700ctl/data/codes.yaml by `r9700ctl explain --markdown`; do not edit. -->",
        "",
        "Every verdict that is not PASS carries one of these codes: in the table, the JSON (`code`),",
        "JUnit (the message starts with it) and Prometheus (the `code` label of `r9700_check_status`).",
        "`r9700ctl explain CODE` prints one record. The list is append-only: a code once shipped keeps",
        "its meaning. Action: what to do with the node (" + ", ".join(ACTIONS) + ").",
        "",
    ]
    for category in sorted({c.category for c in codes.values()}):
        lines += [f"## {category}", "", "| code | meaning | likely cause | next step | action | source |"]
        lines.append("|---|---|---|---|---|---|")
        for entry in sorted((c for c in codes.values() if c.category == category), key=lambda c: c.code):
            issue = f" (known issue `{entry.known_issue}`)" if entry.known_issue else ""
            cells = (entry.meaning + issue, entry.cause, next_step(entry.code), entry.action, entry.source)
            lines.append(f"| `{entry.code}` | " + " | ".join(_cell(c) for c in cells) + " |")
        lines.append("")
    return "\n".join(lines)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
