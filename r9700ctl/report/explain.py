"""`r9700ctl explain` as text: one reason code's record, the list of every code, and the whole
catalogue as Markdown (`render_markdown()` is docs/codes.md; a test keeps the two equal).

The records are the catalogue's (r9700ctl/agent/codes.py, data/codes.yaml), read on either side.
"""

from __future__ import annotations

from collections.abc import Mapping

from r9700ctl.agent.codes import ACTIONS, Code, next_step

DOC_PATH = "docs/codes.md"


def listing_lines(catalogue: Mapping[str, Code]) -> list[str]:
    """Every code with its meaning, by name."""
    width = max(len(name) for name in catalogue)
    return [f"{name:<{width}}  {catalogue[name].meaning}" for name in sorted(catalogue)]


def explain_lines(entry: Code) -> list[str]:
    """The record as `r9700ctl explain CODE` prints it."""
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


def render_markdown(catalogue: Mapping[str, Code]) -> str:
    """docs/codes.md: every code, by category, with its record."""
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
    for category in sorted({c.category for c in catalogue.values()}):
        lines += [f"## {category}", "", "| code | meaning | likely cause | next step | action | source |"]
        lines.append("|---|---|---|---|---|---|")
        for entry in sorted((c for c in catalogue.values() if c.category == category), key=lambda c: c.code):
            issue = f" (known issue `{entry.known_issue}`)" if entry.known_issue else ""
            cells = (entry.meaning + issue, entry.cause, next_step(entry.code), entry.action, entry.source)
            lines.append(f"| `{entry.code}` | " + " | ".join(_cell(c) for c in cells) + " |")
        lines.append("")
    return "\n".join(lines)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
