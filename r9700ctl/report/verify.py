"""`r9700ctl verify` as text: a line per host, a line per failed check, and a closing sentence."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from r9700ctl.verify import VerifyResult


def render_lines(result: VerifyResult) -> list[str]:
    """The host table, one line per problem, and a closing sentence."""
    width = max([4, *(len(h.host) for h in result.hosts)])
    status_width = max([6, *(len(h.status) for h in result.hosts)])
    lines = [f"{'HOST':<{width}}  {'STATUS':<{status_width}}  PASSED  FAILED  SKIPPED  ERRORS"]
    for h in result.hosts:
        lines.append(
            f"{h.host:<{width}}  {h.status:<{status_width}}  {h.passed:>6}  {h.failed:>6}  {h.skipped:>7}  "
            f"{h.errors:>6}"
        )
    problems = result.problems()
    if problems:
        lines.append("")
        for o in problems:
            kind = "could not check" if o.status == "error" else "FAILED"
            first = o.message.strip().splitlines()[0] if o.message.strip() else "no message"
            lines.append(f"{o.host:<{width}}  {kind} {o.label} ({o.file}): {first}")
    failed = sum(1 for h in result.hosts if h.status == "FAIL")
    passed = sum(1 for h in result.hosts if h.status == "PASS")
    unchecked = len(result.hosts) - failed - passed
    for h in result.hosts:
        if h.status == "UNREACHABLE":
            lines.append(
                f"{h.host:<{width}}  could not be reached over SSH: {h.reason} "
                "(`r9700ctl doctor INVENTORY` names the cause and the fix)"
            )
        if h.status == "NOT_CHECKED":
            lines.append(f"{h.host:<{width}}  not checked: no check ran on it ({h.skipped} skipped)")
    lines.append(
        f"{len(result.hosts)} host(s) checked in {result.duration_s:.1f} s: "
        f"{passed} passed, {failed} failed, {unchecked} could not be checked"
    )
    if result.junit_xml:
        lines.append(f"JUnit XML: {result.junit_xml}")
    return lines
