"""What preflight's judges share: the check record and a node's GPU as preflight sees it.

Kept outside preflight.py so that the judges preflight calls (envlist.py, value_rules.py through
variables.py) use them without importing preflight back (tests/unit/test_import_cycles.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from r9700ctl.agent.result import CheckResult


@dataclass
class Check:
    """One verdict of preflight or doctor (the one record both use): `fix` says what to do when
    status is WARN or FAIL."""

    id: str
    status: str
    detail: str
    fix: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)

    def to_result(self, subject: str = "node") -> CheckResult:
        return CheckResult(
            id=f"preflight.{self.id}",
            subject=subject,
            status=self.status,
            hint=self.fix,
            evidence={"detail": self.detail, **self.evidence},
        )

    def one_line(self) -> str:
        return f"{self.detail} (fix: {self.fix})" if self.fix else self.detail

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "status": self.status,
            "detail": self.detail,
            "fix": self.fix,
            "evidence": self.evidence,
        }


@dataclass
class Gpu:
    address: str
    pci_id: str
    name: str
    gfx: str
    discrete: bool
    known: bool
    revision: str = ""  # PCI revision: tells apart products sharing a device id (manifest `skus`)
