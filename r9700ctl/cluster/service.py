"""The use case: `r9700ctl validate INVENTORY --cluster`, phase by phase, stopping at the first that fails.

Library code: no printing; progress goes to the runner's callback; the CLI renders the report.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from r9700ctl.agent.result import ERROR, FAIL, SKIP, CheckResult
from r9700ctl.cluster import collective, isolation, rendezvous
from r9700ctl.cluster import facts as facts_judge
from r9700ctl.cluster import network as network_judge
from r9700ctl.cluster.launch import Launcher, NodeOutput
from r9700ctl.cluster.limits import ClusterLimits, limits
from r9700ctl.cluster.model import PHASES, ClusterReport, Matrix, PhaseReport
from r9700ctl.cluster.plan import RENDEZVOUS_PORT, Measure, disjoint_rounds, pair_plans, rounds
from r9700ctl.cluster.verdicts import no_output, verdict
from r9700ctl.errors import BadInput

if TYPE_CHECKING:
    from r9700ctl.history.runs import HistoryPlan
    from r9700ctl.inventory import Inventory

FACTS_TIMEOUT_S = 120  # reading files and `ip`: seconds; the rest is Ansible's own time
# Phase 3: every node must join within SMOKE_JOIN_S of the first (Ansible starts them within seconds);
# the whole smoke (join, gloo, one RCCL element) has SMOKE_TIMEOUT_S before it is killed.
SMOKE_JOIN_S = 90
SMOKE_TIMEOUT_S = 180
# The choices of the facts phase the torch phases keep ("none" is not kept: that phase asks again
# and says why it cannot run).
RUNTIMES_KEPT = ("host", "container")


@dataclass
class ClusterRequest:
    inventory: Path
    group: str = "r9700_nodes"
    limit: str | None = None
    runtime: str = "auto"
    reports_root: Path | None = None
    measure: Measure = field(default_factory=Measure)
    history: HistoryPlan | None = None  # compare, record and save the run (validate's options)


@dataclass(frozen=True)
class ClusterSettings:
    """The inventory's cluster variables (role r9700_cluster's interface), the same on every node."""

    network: str
    line_rate_mbps: dict[str, int | None]
    rdma: dict[str, Any]


def settings_of(inventory: Inventory, path: Path) -> ClusterSettings:
    """r9700_cluster_network on every node, one CIDR; refused as bad input before any host is touched."""
    if len(inventory.hosts) < 2:
        raise BadInput(
            what=f"validate --cluster needs two or more nodes; the inventory gives {len(inventory.hosts)}",
            where=str(path),
            hint="list every node of the cluster in the group (and drop --limit)",
        )
    networks = {h.name: str(h.vars.get("r9700_cluster_network") or "").strip() for h in inventory.hosts}
    missing = sorted(name for name, value in networks.items() if not value)
    if missing:
        raise BadInput(
            what=f"r9700_cluster_network is not set for {', '.join(missing)}",
            where=str(path),
            hint="set it for the group to the cluster NICs' subnet, e.g. r9700_cluster_network=10.10.0.0/24",
        )
    parsed = {}
    for name, value in networks.items():
        try:
            parsed[name] = str(ipaddress.ip_network(value, strict=False))
        except ValueError:
            raise BadInput(
                what=f"r9700_cluster_network={value!r} of {name} is not a network",
                where=str(path),
                hint="give it as a CIDR, e.g. 10.10.0.0/24",
            ) from None
    if len(set(parsed.values())) > 1:
        listed = ", ".join(f"{n} {v}" for n, v in sorted(parsed.items()))
        raise BadInput(
            what=f"r9700_cluster_network differs between nodes ({listed})",
            where=str(path),
            hint="one cluster network for the group; nodes on other subnets are another cluster",
        )
    from r9700ctl.cluster.netcheck import rdma_problem, settings

    for host in inventory.hosts:  # the rule preflight gives on provision, here before any host
        problem = rdma_problem(host.vars)
        if problem is not None:
            what, fix = problem
            raise BadInput(what=f"{host.name}: {what}", where=str(path), hint=fix)
    rates: dict[str, int | None] = {}
    for host in inventory.hosts:
        value = host.vars.get("r9700_cluster_line_rate_mbps")
        rates[host.name] = int(value) if value not in (None, "", 0, "0") else None
    first = settings(inventory.hosts[0].vars)
    rdma = {
        "mode": first["rdma"],
        "hca": first["hca"],
        "gid_index": inventory.hosts[0].vars.get("r9700_cluster_rdma_gid_index"),
    }
    return ClusterSettings(network=next(iter(parsed.values())), line_rate_mbps=rates, rdma=rdma)


def validate_cluster(request: ClusterRequest, progress: Callable[[Any], None] | None = None) -> ClusterReport:
    from r9700ctl import agentpack, paths
    from r9700ctl.cluster.history import record_history
    from r9700ctl.inventory import load_inventory
    from r9700ctl.validate import new_reports_dir

    if request.history is not None:
        request.history.check()  # a wrong history file or baseline name: bad input, before any host
    inventory = load_inventory(request.inventory, request.group, limit=request.limit)
    settings = settings_of(inventory, request.inventory)
    started = datetime.now(timezone.utc)
    reports_dir = new_reports_dir(request.reports_root or paths.state_dir() / "validate-cluster", started)
    launcher = Launcher(
        inventory=request.inventory,
        group=request.group,
        archive=agentpack.pack(reports_dir / "agent.tar.gz"),
        reports_dir=reports_dir,
        runtime=request.runtime,
        progress=progress,
    )
    report = ClusterReport(
        group=request.group,
        network=settings.network,
        nodes=inventory.host_names,
        started=started.isoformat(timespec="seconds"),
        reports_dir=reports_dir,
    )
    run = _Run(report, launcher, settings, limits(agentpack.data_document("thresholds")), request.measure)
    run.all()
    if request.history is not None:
        record_history(report, request.history)  # the comparison's verdicts join the report
    return report


@dataclass
class _Run:
    report: ClusterReport
    launcher: Launcher
    settings: ClusterSettings
    limits: ClusterLimits
    measure: Measure
    # Where each node's facts phase chose to run torch (its agent.json: host or container); the
    # torch phases' plans pass it on, so the role probes the runtime once per run, not per phase.
    runtimes: dict[str, str] = field(default_factory=dict)

    @property
    def run_id(self) -> str:
        """The rendezvous ids' stem: unique per run (its report directory's name)."""
        return f"r9700ctl-{Path(str(self.report.reports_dir)).name}"

    def all(self) -> None:
        steps = {
            "facts": self.facts,
            "network": self.network,
            "rendezvous": self.rendezvous,
            "collective": self.collective,
        }
        for name in PHASES:
            if any(p.failed for p in self.report.phases):
                self.report.phases.append(_not_run(name, self.report.phases))
                continue
            began = time.monotonic()
            phase = steps[name]()
            phase.seconds = time.monotonic() - began
            self.report.phases.append(phase)

    def facts(self) -> PhaseReport:
        nodes = self.report.nodes
        plans = {n: {"node": n, "cluster_network": self.settings.network} for n in nodes}
        outputs = self.launcher.run("1-facts", "facts", plans, FACTS_TIMEOUT_S)
        self.runtimes = {
            n: chosen
            for n, output in outputs.items()
            if (chosen := str(output.agent.get("runtime") or "").strip()) in RUNTIMES_KEPT
        }
        inputs = [_facts_input(outputs[n]) for n in nodes]
        judged = facts_judge.judge(
            inputs, self.settings.network, self.limits, self.settings.line_rate_mbps, self.settings.rdma
        )
        self.report.nets = judged.nets
        phase = PhaseReport("facts", judged.results)
        if len(judged.nets) < 2 and not phase.failed:
            phase.results.append(
                verdict(
                    "cluster.facts.nodes",
                    "cluster",
                    ERROR,
                    code="CLUSTER_TOO_FEW_NODES",
                    said=f"{len(judged.nets)} node(s) with a cluster address answered",
                )
            )
        return phase

    def network(self) -> PhaseReport:
        nets = self.report.nets
        nodes = sorted(nets)
        addresses = {n: str(nets[n].address) for n in nodes}
        mtus = {n: nets[n].mtu for n in nodes}
        schedule = rounds(nodes)
        documents, missing = self._pairs("2-network", schedule, addresses, mtus)
        pairs = network_judge.records(documents)
        judged = network_judge.judge(pairs, nets, self.limits)
        found = isolation.isolate(nodes, judged.failed, self.limits.blame_min_good_partners)
        if found.retests:  # pairs that can decide which side of a failed pair is at fault
            documents, more_missing = self._pairs(
                "2-network-retest", disjoint_rounds(found.retests), addresses, mtus
            )
            missing += more_missing
            more = network_judge.records(documents)
            retested = network_judge.judge(more, nets, self.limits)
            judged.results += retested.results
            judged.failed.update(retested.failed)
            for node, row in retested.matrix.items():
                judged.matrix.setdefault(node, {}).update({k: v for k, v in row.items() if v is not None})
            found = isolation.isolate(nodes, judged.failed, self.limits.blame_min_good_partners)
        findings = {(r.evidence.get("server"), r.evidence.get("client")): r for r in judged.results}
        keyed = {tuple(sorted(k)): v for k, v in findings.items() if None not in k}
        results = missing + judged.results + isolation.results(found, "network", keyed)
        return PhaseReport("network", results, matrix=Matrix("GB/s", judged.matrix))

    def rendezvous(self) -> PhaseReport:
        nets = self.report.nets
        nodes = sorted(nets)
        head = nodes[0]
        plans = {
            n: {
                "node": n,
                "address": nets[n].address,
                "head": head,
                "head_address": nets[head].address,
                "port": RENDEZVOUS_PORT,
                "nnodes": len(nodes),
                "nproc_per_node": 1,
                "run_id": f"{self.run_id}-smoke",
                "join_timeout_s": SMOKE_JOIN_S,
                "timeout_s": SMOKE_TIMEOUT_S,
            }
            for n in nodes
        }
        outputs = self.launcher.run("3-rendezvous", "smoke", self._with_runtime(plans), SMOKE_TIMEOUT_S + 30)
        documents = {n: o.document for n, o in outputs.items()}
        errors = {n: o.error for n, o in outputs.items()}
        stopped = {n for n, o in outputs.items() if o.timed_out}
        return PhaseReport(
            "rendezvous", rendezvous.judge(documents, errors, nets, self.settings.rdma, stopped)
        )

    def collective(self) -> PhaseReport:
        """Every pair of nodes in round-robin rounds (as phase 2), one rank per node, then every GPU
        of each node, then the whole cluster: one playbook run, one wall clock for all the steps."""
        nets = self.report.nets
        nodes = sorted(nets)
        gpus = min(net.gpus for net in nets.values())
        network = next((p for p in self.report.phases if p.name == "network"), None)
        figures = network.matrix.values if network is not None and network.matrix else {}
        steps = collective.schedule(nodes, gpus, f"{self.run_id}-4-collective")
        timeout = collective.wall_clock_s(steps)
        addresses = {n: str(nets[n].address) for n in nodes}
        plans = self._with_runtime(collective.plans(steps, addresses, timeout))
        outputs = self.launcher.run("4-collective", "collective", plans, timeout + 60)
        seen = collective.step_results({n: o.document for n, o in outputs.items()})
        results = _missing("cluster.collective.node", outputs)
        known = [v for row in figures.values() for v in row.values() if isinstance(v, float)]
        failed: dict[tuple[str, str], bool] = {}
        matrix: dict[str, dict[str, float | None]] = {n: {} for n in nodes}
        for step in steps:
            members = step["members"]
            pair = len(members) == 2
            expected = figures.get(members[0], {}).get(members[1]) if pair else min(known, default=None)
            result = collective.judge_step(
                step["name"], members, seen.get(step["name"]), expected, self.limits
            )
            results.append(result)
            if pair:  # a pair fails when any of its steps fails (one rank per node, or every GPU)
                key = (min(members), max(members))
                failed[key] = failed.get(key, False) or result.status == FAIL
                if step["nproc_per_node"] == 1 and isinstance(result.value, float):
                    matrix[members[0]][members[1]] = matrix[members[1]][members[0]] = result.value
        if gpus < 1:
            results.append(
                verdict(
                    "cluster.collective.gpus",
                    "cluster",
                    SKIP,
                    code="CLUSTER_NO_GPU",
                    said="no GPU on the nodes: one rank per node on the CPU (gloo); the all-GPU "
                    "steps need GPUs",
                )
            )
        # Every pair met, so isolation has nothing left to retest: it names a node or a link.
        found = isolation.isolate(nodes, failed, self.limits.blame_min_good_partners)
        pairs = [r for r in results if r.id == "cluster.collective.pair"]
        keyed = {tuple(sorted(r.subject.split("<->"))): r for r in pairs if r.status != FAIL}
        keyed.update({tuple(sorted(r.subject.split("<->"))): r for r in pairs if r.status == FAIL})
        results += isolation.results(found, "collective", keyed)
        return PhaseReport("collective", results, matrix=Matrix("GB/s busbw", matrix))

    def _with_runtime(self, plans: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """The plans, each with where its node's facts phase chose to run torch (where it chose)."""
        kept = self.runtimes
        return {n: {**plan, "runtime": kept[n]} if n in kept else plan for n, plan in plans.items()}

    def _pairs(
        self,
        label: str,
        schedule: list[list[tuple[str, str]]],
        addresses: dict[str, str],
        mtus: dict[str, Any],
    ) -> tuple[dict[str, dict[str, Any] | None], list[CheckResult]]:
        """Each node's document of the pairs phase, and a verdict per node that left none."""
        involved = sorted({n for pairs in schedule for pair in pairs for n in pair})
        plans = pair_plans(schedule, {n: addresses[n] for n in involved}, mtus, self.measure)
        timeout = len(schedule) * self.measure.round_budget_s() + 30
        outputs = self.launcher.run(label, "pairs", plans, timeout)
        return {n: out.document for n, out in outputs.items()}, _missing("cluster.network.node", outputs)


def _facts_input(output: NodeOutput) -> facts_judge.NodeInput:
    return facts_judge.NodeInput(
        node=output.node,
        facts=output.document,
        routes=output.routes,
        runtime=output.agent,
        error=output.error,
        timed_out=output.timed_out,
    )


def _missing(check: str, outputs: dict[str, NodeOutput]) -> list[CheckResult]:
    """A verdict per node whose phase program left no document (its wall clock, or no answer)."""
    return [
        no_output(check, node, output.error, output.timed_out)
        for node, output in sorted(outputs.items())
        if output.document is None
    ]


def _not_run(name: str, before: list[PhaseReport]) -> PhaseReport:
    failed = next(p.name for p in before if p.failed)
    note = f"not run: the {failed} phase failed"
    result = verdict(f"cluster.{name}", "cluster", SKIP, code="CLUSTER_NOT_RUN", said=note)
    return PhaseReport(name, [result], note=note, ran=False)
