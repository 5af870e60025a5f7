"""validate --cluster probes each node's torch runtime once per run: the facts phase chooses, and the
torch phases (smoke, collective) get that choice in their plans (r9700ctl/cluster/service.py), where
the role keeps it instead of importing torch again (roles/r9700_validate/tasks/cluster.yml)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from r9700ctl import agentpack
from r9700ctl.cluster.facts import NodeNet
from r9700ctl.cluster.launch import NodeOutput
from r9700ctl.cluster.limits import limits
from r9700ctl.cluster.model import ClusterReport
from r9700ctl.cluster.plan import Measure
from r9700ctl.cluster.service import ClusterSettings, _Run

NODES = ["node1", "node2", "node3"]
# What each node's facts phase chose (agent.json "runtime"): node3 found no torch.
CHOSEN = {"node1": "host", "node2": "container", "node3": "none"}


class RecordingLauncher:
    """Stands in for the playbook run: records each phase's plans, answers with agent.json only."""

    def __init__(self) -> None:
        self.plans: dict[str, dict[str, dict[str, Any]]] = {}

    def run(self, label: str, phase: str, plans: dict[str, dict[str, Any]], timeout_s: float) -> dict:
        self.plans[phase] = plans
        # agent.json as the role writes it (the service strips what the folded choice may carry)
        said = {n: {"runtime": CHOSEN[n] + "\n"} if phase == "facts" else {} for n in plans}
        return {n: NodeOutput(n, agent=said[n]) for n in plans}


def a_run(tmp_path: Path) -> tuple[_Run, RecordingLauncher]:
    launcher = RecordingLauncher()
    report = ClusterReport(group="r9700_nodes", network="10.9.0.0/24", nodes=NODES, reports_dir=tmp_path)
    settings = ClusterSettings(network="10.9.0.0/24", line_rate_mbps={}, rdma={"mode": "off"})
    thresholds = limits(agentpack.data_document("thresholds"))
    return _Run(report, launcher, settings, thresholds, Measure()), launcher  # type: ignore[arg-type]


def test_the_torch_phases_get_the_runtime_the_facts_phase_chose_and_none_is_asked_again(tmp_path):
    run, launcher = a_run(tmp_path)
    run.facts()
    assert "runtime" not in launcher.plans["facts"]["node1"]  # the facts phase probes
    # the later phases need the nodes' cluster addresses (the facts phase's judge sets them)
    run.report.nets = {
        n: NodeNet(n, "eth1", f"10.9.0.{i}", 1500, 1000, 1000) for i, n in enumerate(NODES, start=1)
    }
    run.rendezvous()
    run.collective()
    for phase in ("smoke", "collective"):
        plans = launcher.plans[phase]
        assert plans["node1"]["runtime"] == "host" and plans["node2"]["runtime"] == "container"
        assert "runtime" not in plans["node3"], "a node without torch is asked again and says why"
