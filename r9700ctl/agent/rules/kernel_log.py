"""What amdgpu's trouble in the kernel log means: each kind of line the dmesg parser finds
(r9700ctl/agent/parsers/dmesg.py) has one severity and one reason code, in data/manifest.yaml
`kernel_log_signatures` (the code's record in data/codes.yaml says what it means and what to do,
with the owners' threads it comes from). The agent judges its own node's log with it, the bundle
diagnosis a recorded dmesg.txt; a kind whose severity is "none" is counted, never a verdict alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from r9700ctl.agent.result import FAIL, SEVERITY, WARN

SEVERITIES = (FAIL, WARN, "none")


@dataclass(frozen=True)
class KindVerdict:
    """One kind of trouble found: its status (FAIL or WARN), code and the lines that show it."""

    kind: str
    status: str
    code: str
    lines: tuple[Any, ...]  # the parser's findings (line number, text, GPU address)


def judge(findings: Sequence[Any], signatures: Mapping[str, Mapping[str, Any]]) -> list[KindVerdict]:
    """Per kind found, in the signatures' order: its verdict; kinds of severity "none" are left out.

    `findings`: the parser's DmesgFinding list (each with `kind`); `signatures`: the manifest's
    kernel_log_signatures ({kind: {severity, code}}).
    """
    verdicts = []
    for kind, signature in signatures.items():
        severity = str(signature.get("severity"))
        found = tuple(f for f in findings if f.kind == kind)
        if not found or severity not in (FAIL, WARN):
            continue
        verdicts.append(KindVerdict(kind, severity, str(signature["code"]), found))
    return verdicts


def worst(verdicts: Sequence[KindVerdict]) -> KindVerdict | None:
    """The most severe kind found (the first of that severity), None when none was."""
    return max(verdicts, key=lambda v: SEVERITY[v.status], default=None)
