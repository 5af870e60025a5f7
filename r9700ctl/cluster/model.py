"""What `validate --cluster` found: phases, their verdicts and matrices; the JSON document.

Schema r9700ctl.validate-cluster/1 (fields are only added within the version):
  schema, toolkit_version, group, network, nodes, started, status, exit_code, stopped_after,
  culprit {phase, kind (node|link|pair|cluster), subject, code, said, next},
  nets {node: {interface, address, mtu, speed_mbps, line_rate_mbps, gpus}},
  phases [{name, status, seconds, note, results [CheckResult], matrix {unit, values {a: {b: x}}}}],
  reports_dir, notes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from r9700ctl.agent import schemas
from r9700ctl.agent.result import ERROR, FAIL, SEVERITY, SKIP, CheckResult, exit_code_for, overall
from r9700ctl.cluster.facts import NodeNet
from r9700ctl.errors import EXIT_CANNOT_RUN

SCHEMA = schemas.VALIDATE_CLUSTER
PHASES = ("facts", "network", "rendezvous", "collective")


@dataclass
class Matrix:
    unit: str
    values: dict[str, dict[str, float | None]]

    def to_dict(self) -> dict[str, Any]:
        return {"unit": self.unit, "values": self.values}


@dataclass
class PhaseReport:
    name: str
    results: list[CheckResult] = field(default_factory=list)
    matrix: Matrix | None = None
    seconds: float = 0.0
    note: str = ""  # why it did not run, or what it could not do
    ran: bool = True

    @property
    def status(self) -> str:
        return overall([r.status for r in self.results]) if self.ran else SKIP

    @property
    def failed(self) -> bool:
        return any(r.status in (FAIL, ERROR) for r in self.results)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "ran": self.ran,
            "seconds": round(self.seconds, 1),
            "note": self.note,
            "results": [r.to_dict() for r in self.results],
            "matrix": self.matrix.to_dict() if self.matrix else None,
        }


@dataclass
class ClusterReport:
    group: str
    network: str
    nodes: list[str]
    started: str = ""
    phases: list[PhaseReport] = field(default_factory=list)
    nets: dict[str, NodeNet] = field(default_factory=dict)
    reports_dir: Path | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def results(self) -> list[CheckResult]:
        return [r for phase in self.phases for r in phase.results]

    @property
    def status(self) -> str:
        return overall([r.status for r in self.results])

    @property
    def exit_code(self) -> int:
        """0/1/2/4 from the worst verdict; 3 when a node could not be reached or a phase could not run."""
        if any(r.status == ERROR for r in self.results):
            return EXIT_CANNOT_RUN
        return exit_code_for([r.status for r in self.results])

    @property
    def stopped_after(self) -> str | None:
        ran = [p for p in self.phases if p.ran]
        if ran and len(ran) < len(self.phases) and ran[-1].failed:
            return ran[-1].name
        return None

    def culprit(self) -> dict[str, Any] | None:
        """The finding to act on first: a blamed node or link, else the worst verdict of the first
        phase that failed; with the phase that found it and the code's next step."""
        from r9700ctl.agent import codes

        for phase in self.phases:
            bad = [r for r in phase.results if r.status not in ("PASS", "SKIP")]
            if not bad:
                continue
            blamed = [r for r in bad if r.id.startswith("cluster.isolation.") and r.status == FAIL]
            chosen = blamed[0] if blamed else max(bad, key=lambda r: SEVERITY[r.status])
            kind = "node" if "<->" not in chosen.subject else "link" if blamed else "pair"
            if chosen.subject == "cluster":
                kind = "cluster"
            record = codes.record(chosen.code) if chosen.code else None
            return {
                "phase": phase.name,
                "kind": kind,
                "subject": chosen.subject,
                "status": chosen.status,
                "code": chosen.code,
                "said": chosen.hint.split("; ")[0] if chosen.hint else "",
                "next": record.next if record else "",
                "action": record.action if record else "",
            }
        return None

    def to_dict(self) -> dict[str, Any]:
        from r9700ctl import __version__

        return {
            "schema": SCHEMA,
            "toolkit_version": __version__,
            "group": self.group,
            "network": self.network,
            "nodes": self.nodes,
            "started": self.started,
            "status": self.status,
            "exit_code": self.exit_code,
            "stopped_after": self.stopped_after,
            "culprit": self.culprit(),
            "nets": {name: net.to_dict() for name, net in self.nets.items()},
            "phases": [p.to_dict() for p in self.phases],
            "reports_dir": str(self.reports_dir) if self.reports_dir else None,
            "notes": self.notes,
        }
