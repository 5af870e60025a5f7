"""Phase 3 of `validate --cluster` on a real GPU: torchrun, gloo, one NCCL/RCCL element, and the judge.

The lab proves the cluster phases on CPUs with gloo; only a GPU shows what NCCL_DEBUG=INFO really
prints and whether the judge reads the interface from it. One node of one rank here (the lent GPU
machine has one GPU); the node's own address and interface stand for the cluster NIC.
"""

from __future__ import annotations

import json
import socket

import pytest

from r9700ctl.agent.cluster import smoke
from r9700ctl.cluster.facts import NodeNet
from r9700ctl.cluster.rendezvous import judge_node, nccl_interfaces

pytestmark = pytest.mark.gpu


def _own_interface() -> tuple[str, str]:
    """An interface of this machine with an IPv4 address (another than loopback where there is one),
    standing for the cluster NIC (the lent GPU machine has no `ip` command: psutil reads them)."""
    psutil = pytest.importorskip("psutil")
    found = [
        (name, entry.address)
        for name, entries in psutil.net_if_addrs().items()
        for entry in entries
        if entry.family == socket.AF_INET
        and psutil.net_if_stats().get(name, None)
        and psutil.net_if_stats()[name].isup
    ]
    if not found:
        pytest.skip("no interface with an IPv4 address on this machine")
    found.sort(key=lambda pair: pair[0] == "lo")  # a real NIC first
    return found[0]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("", 0))
        return probe.getsockname()[1]


def test_the_smoke_phase_reduces_through_nccl_and_the_judge_reads_the_interface_it_named():
    interface, address = _own_interface()
    plan = {
        "node": "gpu-node",
        "head": "gpu-node",
        "head_address": address,
        "address": address,
        "port": _free_port(),
        "run_id": "gpu-smoke",
        "nnodes": 1,
        "nproc_per_node": 1,
        "join_timeout_s": 60,
        "timeout_s": 240,
    }

    document = smoke.run(plan, {"NCCL_SOCKET_IFNAME": interface, "GLOO_SOCKET_IFNAME": interface})

    torchrun = document["torchrun"]
    print(json.dumps({"nccl_lines": torchrun["nccl_lines"], "ranks": document["ranks"]}, indent=1))
    assert torchrun["rc"] == 0 and not torchrun["timed_out"], "\n".join(torchrun["tail"])
    rank = document["ranks"][0]
    assert rank["gpu"]["ran"] and rank["gpu"]["wrong"] == 0
    named = nccl_interfaces(torchrun["nccl_lines"])
    # Whatever NCCL printed about interfaces, the judge must have found exactly the one it was told.
    assert all(names == [interface] for transport, names in named.items() if transport != "NET/IB"), named
    net = NodeNet(
        node="gpu-node", interface=interface, address=address, mtu=None, speed_mbps=None, line_rate_mbps=None
    )
    verdicts = {r.id: r for r in judge_node("gpu-node", document, net)}
    assert verdicts["cluster.rendezvous.join"].status == "PASS"
    assert verdicts["cluster.rendezvous.gloo"].status == "PASS", verdicts["cluster.rendezvous.gloo"]
    assert verdicts["cluster.rendezvous.rccl"].status == "PASS", verdicts["cluster.rendezvous.rccl"]


def test_an_interface_nccl_cannot_use_fails_the_smoke_phase_with_the_reason():
    """NCCL_SOCKET_IFNAME naming no interface of the node (a typo in r9700_env's list): RCCL's
    bootstrap finds none and the judge says so, rather than passing or hanging."""
    interface, address = _own_interface()
    plan = {
        "node": "gpu-node",
        "head": "gpu-node",
        "head_address": address,
        "address": address,
        "port": _free_port(),
        "run_id": "gpu-smoke-bad-if",
        "nnodes": 1,
        "nproc_per_node": 1,
        "join_timeout_s": 60,
        "timeout_s": 240,
    }

    document = smoke.run(plan, {"NCCL_SOCKET_IFNAME": "nosuchif0", "GLOO_SOCKET_IFNAME": interface})

    print(json.dumps({"tail": document["torchrun"]["tail"][-20:], "ranks": document["ranks"]}, indent=1))
    assert not document["torchrun"]["timed_out"]
    net = NodeNet(
        node="gpu-node", interface=interface, address=address, mtu=None, speed_mbps=None, line_rate_mbps=None
    )
    verdicts = {r.id: r for r in judge_node("gpu-node", document, net)}
    statuses = {v.status for v in verdicts.values()}
    assert "FAIL" in statuses, verdicts
