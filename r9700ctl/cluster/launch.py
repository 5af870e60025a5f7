"""One phase on many nodes: playbooks/validate_cluster.yml (the r9700_validate role's cluster tasks).

The plans go in as an extra variable (inventory_hostname -> plan); each node's results come back
under DEST/<phase>/<host>.json, .agent.json (exit status, runtime, output tail) and .routes.json.
Forks cover every node of the phase, so their phase programs run at once; the limit is the phase's
nodes (a retest runs only the pairs it needs).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class NodeOutput:
    node: str
    document: dict[str, Any] | None = None
    routes: dict[str, Any] | None = None
    agent: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    timed_out: bool = False  # the role's `timeout` stopped the phase program (its wall clock ran out)


@dataclass
class Launcher:
    inventory: Path
    group: str
    archive: Path
    reports_dir: Path
    runtime: str = "auto"
    progress: Callable[[Any], None] | None = None
    runs: list[Path] = field(default_factory=list)

    def run(
        self, label: str, phase: str, plans: dict[str, dict[str, Any]], timeout_s: float
    ) -> dict[str, NodeOutput]:
        from r9700ctl import ansible_run, paths

        dest = self.reports_dir / label
        dest.mkdir(parents=True, exist_ok=True)
        request = ansible_run.RunRequest(
            playbook=paths.playbook("validate_cluster.yml"),
            inventory=self.inventory,
            limit=",".join(sorted(plans)),
            hosts=len(plans),  # every node of the phase at once: their programs run together
            extra_vars={
                "r9700_group": self.group,
                "r9700_validate_dest": str(dest),
                "r9700_validate_agent_archive": str(self.archive),
                "r9700_validate_runtime": self.runtime,
                "r9700_validate_cluster_phase": phase,
                "r9700_validate_cluster_plans": plans,
                "r9700_validate_cluster_timeout": int(timeout_s),
            },
        )
        result = ansible_run.run_playbook(request, on_progress=self.progress)
        self.runs.append(result.run_dir)
        result.require_a_host()
        outputs = {}
        for node in plans:
            host = result.hosts.get(node)
            output = NodeOutput(
                node,
                document=_read(dest / phase / f"{node}.json"),
                routes=_read(dest / phase / f"{node}.routes.json"),
                agent=_read(dest / phase / f"{node}.agent.json") or {},
            )
            if host is None:
                output.error = "not in the play's results"
            elif host.status == "UNREACHABLE" or host.first_error:
                output.error = host.first_error or "unreachable"
            elif output.document is None:
                output.timed_out = _timed_out(output.agent)
                output.error = _why_nothing(output.agent, phase)
            outputs[node] = output
        return outputs


def _timed_out(agent: dict[str, Any]) -> bool:
    """agent.json's timed_out: `timeout` exited 124 (Jinja text where ansible-core templates to strings)."""
    return str(agent.get("timed_out")).lower() == "true"


def _why_nothing(agent: dict[str, Any], phase: str) -> str:
    if _timed_out(agent):
        return f"the {phase} phase ran past its wall clock and was stopped (exit {agent.get('rc')})"
    lines = [str(line) for line in agent.get("stderr_tail") or [] if str(line).strip()]
    said = lines[-1] if lines else str(agent.get("msg") or "no output")
    return f"the {phase} program wrote nothing (exit {agent.get('rc')}): {said}"


def _read(path: Path) -> dict[str, Any] | None:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return document if isinstance(document, dict) else None
