"""`r9700ctl validate INVENTORY`: run the on-node agent on every node through Ansible, judge the fleet.

The inventory is checked first (bad input touches no host). The agent (r9700ctl/__init__.py,
r9700ctl/agent/, the data files as JSON: r9700ctl.agentpack) is packed once into the run's
report directory and playbooks/validate.yml (role r9700_validate) unpacks it on each node, runs
it, and fetches REPORTS/<host>.json plus REPORTS/<host>.agent.json (its exit status and output
tail). Then every node's report is read and r9700ctl.fleet judges each node against the others.
Library code: progress goes through a callback, nothing is printed.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from r9700ctl import fleet as fleet_judge
from r9700ctl.agent import levels, schemas
from r9700ctl.agent.result import (
    ERROR,
    FAIL,
    INCONCLUSIVE,
    PASS,
    QUIET,
    STATUSES,
    WARN,
    CheckResult,
    exit_code_for,
    overall,
    worst,
)
from r9700ctl.errors import EXIT_CANNOT_RUN
from r9700ctl.fleet import FleetJudgement

if TYPE_CHECKING:
    from r9700ctl.history.runs import HistoryPlan

SCHEMA = schemas.VALIDATE_FLEET
AGENT_SCHEMA = schemas.VALIDATE
UNREACHABLE = "UNREACHABLE"
NO_REPORT = "NO_REPORT"  # reached, but the agent wrote no report: it could not run


@dataclass
class NodeOutcome:
    """One node's part of the run: the agent's report as fetched, or why there is none."""

    host: str
    status: str  # the report's status, UNREACHABLE or NO_REPORT
    report: dict[str, Any] | None = None
    agent_rc: int | None = None
    error: str = ""
    runtime: str = ""  # where the agent ran: container, host, or none (it could not run)
    image: str = ""  # the container image, when it ran in one

    @property
    def runtime_text(self) -> str:
        if self.runtime == "container":
            return f"container {self.image}"
        return self.runtime or "-"

    @property
    def counts(self) -> dict[str, int]:
        results = (self.report or {}).get("results") or []
        statuses = [r.get("status") for r in results if isinstance(r, dict)]
        return {
            "passed": statuses.count(PASS),
            "warn": statuses.count(WARN),
            "fail": statuses.count(FAIL),
            "inconclusive": statuses.count(INCONCLUSIVE),
        }

    def worst_finding(self) -> dict[str, Any] | None:
        """The most severe non-passing result of this node's report (first one of that severity)."""
        results = [r for r in (self.report or {}).get("results") or [] if isinstance(r, dict)]
        bad = [r for r in results if r.get("status") in STATUSES and r.get("status") not in QUIET]
        if not bad:
            return None
        status = worst([r["status"] for r in bad])
        return next(r for r in bad if r["status"] == status)

    def to_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "status": self.status,
            "agent_rc": self.agent_rc,
            "error": self.error,
            "runtime": self.runtime,
            "image": self.image,
            "counts": self.counts,
            "report": self.report,
        }


@dataclass
class FleetReport:
    level: str
    nodes: list[NodeOutcome]
    fleet: FleetJudgement
    reports_dir: Path
    run_dir: Path | None = None
    run_status: str = ""
    started: str = ""
    notes: list[str] = field(default_factory=list)
    comparisons: dict[str, list[CheckResult]] = field(default_factory=dict)  # node -> baseline.*

    @property
    def status(self) -> str:
        node_statuses = [n.status if n.status in STATUSES else ERROR for n in self.nodes]
        return overall(node_statuses + [r.status for r in self.fleet.results])  # no node: INCONCLUSIVE

    @property
    def exit_code(self) -> int:
        """0/1/2/4 from the worst result; 3 when a node was unreachable or its agent could not run."""
        if any(n.status in (UNREACHABLE, NO_REPORT) for n in self.nodes):
            return EXIT_CANNOT_RUN
        return exit_code_for([self.status])

    def restated(self) -> FleetReport:
        """Each node's status read again from its report (after results were added to it)."""
        for node in self.nodes:
            if node.report is not None and node.report.get("status") in STATUSES:
                node.status = str(node.report["status"])
        return self

    def to_dict(self) -> dict[str, Any]:
        from r9700ctl import __version__

        return {
            "schema": SCHEMA,
            "toolkit_version": __version__,
            "level": self.level,
            "started": self.started,
            "reports_dir": str(self.reports_dir),
            "run_dir": str(self.run_dir) if self.run_dir else None,
            "run_status": self.run_status,
            "status": self.status,
            "exit_code": self.exit_code,
            "nodes": [n.to_dict() for n in self.nodes],
            "fleet": {
                "results": [r.to_dict() for r in self.fleet.results],
                "compared_metrics": self.fleet.compared,
                "note": self.fleet.note,
            },
            "notes": self.notes,
        }


def validate_inventory(
    inventory_path: str | Path,
    group: str,
    *,
    level: str = "config",
    limit: str | None = None,
    expected_gpus: int | None = None,
    allow_busy: bool = False,
    runtime: str = "auto",
    progress: Callable[[Any], None] | None = None,
    reports_root: Path | None = None,
    history: HistoryPlan | None = None,
) -> FleetReport:
    """Check the inventory, run playbooks/validate.yml on its nodes, judge what they reported,
    then compare with the history and record the run there (`history`, when given)."""
    from r9700ctl import agentpack, ansible_run, paths
    from r9700ctl.inventory import load_inventory

    if history is not None:
        history.check()  # a wrong history file or baseline name: bad input, before any host
    inventory = load_inventory(inventory_path, group, limit=limit)
    started = datetime.now(timezone.utc)
    reports_dir = new_reports_dir(reports_root or paths.state_dir() / "validate", started)
    archive = agentpack.pack(reports_dir / "agent.tar.gz")

    extra_vars: dict[str, Any] = {
        "r9700_group": group,
        "r9700_validate_dest": str(reports_dir),
        "r9700_validate_agent_archive": str(archive),
        "r9700_validate_level": level,
        "r9700_validate_timeout": levels.TIMEOUT_S[level],
        "r9700_validate_allow_busy": allow_busy,
        "r9700_validate_runtime": runtime,
    }
    if expected_gpus is not None:
        extra_vars["r9700_expected_gpus"] = expected_gpus
    request = ansible_run.RunRequest(
        playbook=paths.playbook("validate.yml"),
        inventory=Path(inventory_path),
        limit=limit,
        hosts=len(inventory.hosts),
        extra_vars=extra_vars,
    )
    result = ansible_run.run_playbook(request, on_progress=progress).require_a_host()

    nodes = [read_node(host.name, reports_dir, result.hosts.get(host.name)) for host in inventory.hosts]
    reports = {n.host: n.report for n in nodes if n.report is not None}
    report = FleetReport(
        level=level,
        nodes=nodes,
        fleet=fleet_judge.judge_fleet(reports, fleet_judge.limits(agentpack.data_document("thresholds"))),
        reports_dir=reports_dir,
        run_dir=result.run_dir,
        run_status=result.status,
        started=started.isoformat(timespec="seconds"),
    )
    if history is not None:
        report.comparisons = history.after_run(
            reports, lambda: report.restated().to_dict(), scope="inventory", source=str(reports_dir)
        )
    return report


def new_reports_dir(root: Path, started: datetime) -> Path:
    """A fresh directory per run (never an old report passing for a new one), mode 0700."""
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    stamp = started.strftime("%Y%m%dT%H%M%SZ")
    return Path(tempfile.mkdtemp(prefix=f"{stamp}-", dir=root))


def read_node(host: str, reports_dir: Path, outcome: Any) -> NodeOutcome:
    """What one node gave: its report, or UNREACHABLE / NO_REPORT with the reason."""
    agent = _read_json(reports_dir / f"{host}.agent.json") or {}
    rc = agent.get("rc")
    agent_rc = int(rc) if isinstance(rc, (int, str)) and str(rc).lstrip("-").isdigit() else None
    if getattr(outcome, "status", None) == UNREACHABLE:
        return NodeOutcome(host, UNREACHABLE, error=outcome.first_error or "host unreachable")
    where = {"runtime": str(agent.get("runtime") or ""), "image": str(agent.get("image") or "")}
    report = _read_json(reports_dir / f"{host}.json")
    if report is None or report.get("schema") != AGENT_SCHEMA:
        return NodeOutcome(host, NO_REPORT, agent_rc=agent_rc, error=_why_no_report(agent, outcome), **where)
    status = report.get("status") if report.get("status") in STATUSES else ERROR
    return NodeOutcome(host, str(status), report=report, agent_rc=agent_rc, **where)


def _why_no_report(agent: dict[str, Any], outcome: Any) -> str:
    if outcome is None:
        return "not in the play's results"
    if getattr(outcome, "first_error", ""):
        return str(outcome.first_error)
    if agent.get("runtime") == "none":  # the role found no torch and no provisioned image
        return str(agent.get("msg") or "could not run")
    if agent.get("timed_out"):
        return "the agent ran past its timeout and was stopped"
    lines = [str(line) for line in agent.get("stderr_tail") or [] if str(line).strip()]
    said = lines[-1] if lines else str(agent.get("msg") or "no output")
    return f"the agent wrote no report (exit {agent.get('rc')}): {said}"


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return document if isinstance(document, dict) else None
