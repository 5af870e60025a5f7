"""Phase 3's judge: did every node join one rendezvous, reduce correctly, and over the cluster NIC?

Per node: `cluster.rendezvous.join` (its torchrun joined and its worker got a process group),
`cluster.rendezvous.gloo` (the gloo all-reduce's result, and the local address of every TCP
connection the worker held to a peer: each must be the node's cluster address), and
`cluster.rendezvous.rccl` (one element through RCCL/NCCL, and the interface NCCL_DEBUG=INFO says it
took; SKIP where torch sees no GPU, the backend being chosen by the GPU).
"""

from __future__ import annotations

import re
from typing import Any

from r9700ctl.agent.result import ERROR, FAIL, PASS, SKIP, CheckResult
from r9700ctl.cluster.facts import NodeNet
from r9700ctl.cluster.verdicts import verdict

# NCCL_DEBUG=INFO lines naming the interfaces (NCCL/RCCL src/misc/socket.cc, transport/net_socket.cc,
# net_ib.cc): "NCCL INFO NET/Socket : Using [0]eth1:10.0.0.1<0>", "NCCL INFO Bootstrap : Using eth1:...",
# "NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [RO]; OOB eth1:...".
_USING = re.compile(r"(NET/Socket|NET/IB|Bootstrap)\s*:\s*Using\s+(.*)$")
_IFACE = re.compile(r"(?:\[\d+\])?([A-Za-z0-9_.\-]+):(\d+\.\d+\.\d+\.\d+|[0-9a-f:]+)")
_IB_DEVICE = re.compile(r"\[\d+\]([A-Za-z0-9_.\-]+):\d+/")
_OOB = re.compile(r"OOB\s+([A-Za-z0-9_.\-]+):")


def nccl_interfaces(lines: list[str]) -> dict[str, list[str]]:
    """Transport -> the interfaces NCCL said it uses (IB devices for NET/IB, with its OOB interface)."""
    found: dict[str, list[str]] = {}
    for line in lines:
        match = _USING.search(line)
        if not match:
            continue
        transport, rest = match.group(1), match.group(2)
        names = [m.group(1) for m in _IFACE.finditer(rest)] if transport != "NET/IB" else []
        names += [m.group(1) for m in _OOB.finditer(rest)]
        if transport == "NET/IB":  # "[0]mlx5_0:1/RoCE"; "Using [RO]; OOB ..." names no device
            names = _IB_DEVICE.findall(rest) + names
        found.setdefault(transport, [])
        found[transport] += [n for n in names if n not in found[transport]]
    return found


def judge(
    documents: dict[str, dict[str, Any] | None], errors: dict[str, str], nets: dict[str, NodeNet]
) -> list[CheckResult]:
    results: list[CheckResult] = []
    for node in sorted(nets):
        document = documents.get(node)
        if document is None:
            results.append(
                verdict(
                    "cluster.rendezvous.join",
                    node,
                    ERROR,
                    code="CLUSTER_UNREACHABLE",
                    said=errors.get(node) or "the rendezvous program wrote nothing",
                )
            )
            continue
        results += judge_node(node, document, nets[node])
    return results


def judge_node(node: str, document: dict[str, Any], net: NodeNet) -> list[CheckResult]:
    torchrun = document.get("torchrun") or {}
    ranks = document.get("ranks") or []
    evidence = {
        "torchrun_rc": torchrun.get("rc"),
        "tail": (torchrun.get("tail") or [])[-15:],
        "environment": torchrun.get("environment"),
    }
    failed_rank = next((r for r in ranks if r.get("error")), None)
    if not ranks or ("world_size" not in ranks[0] and failed_rank is not None):
        said = _why(torchrun, failed_rank)
        code = (
            "CLUSTER_COLLECTIVE_TIMEOUT"
            if "gloo" in said.lower() and "connect" in said.lower()
            else "CLUSTER_RENDEZVOUS_FAILED"
        )
        return [verdict("cluster.rendezvous.join", node, FAIL, code=code, said=said, evidence=evidence)]
    results = [
        verdict(
            "cluster.rendezvous.join",
            node,
            PASS,
            value=ranks[0].get("world_size"),
            unit="ranks",
            said=f"joined a world of {ranks[0].get('world_size')} rank(s)",
            evidence=evidence,
        )
    ]
    if failed_rank is not None and "gloo" not in failed_rank:
        said = f"the gloo all-reduce did not finish: {failed_rank['error']}"
        results.append(
            verdict(
                "cluster.rendezvous.gloo",
                node,
                FAIL,
                code="CLUSTER_COLLECTIVE_TIMEOUT",
                said=said,
                evidence=evidence,
            )
        )
        return results
    results.append(_gloo(node, ranks[0], net))
    results.append(_gpu(node, ranks[0], torchrun, net))
    return results


def _why(torchrun: dict[str, Any], failed_rank: dict[str, Any] | None) -> str:
    if failed_rank is not None:
        return str(failed_rank["error"]).splitlines()[0][:400]
    if torchrun.get("timed_out"):
        return "torchrun ran past the phase's wall clock and was stopped (a peer that never joined?)"
    tail = [line for line in torchrun.get("tail") or [] if "Error" in line or "error" in line]
    return (tail[-1] if tail else f"torchrun exited {torchrun.get('rc')} with no worker result")[:400]


def _gloo(node: str, rank: dict[str, Any], net: NodeNet) -> CheckResult:
    gloo = rank.get("gloo") or {}
    connections = gloo.get("connections") or []
    evidence = {"gloo": gloo}
    if gloo.get("wrong"):
        return verdict(
            "cluster.rendezvous.gloo",
            node,
            FAIL,
            code="CLUSTER_WRONG_RESULT",
            value=gloo["wrong"],
            unit="elements",
            said=f"{gloo['wrong']} element(s) off {gloo.get('expected')}",
            evidence=evidence,
        )
    local = sorted({c["local"].rsplit(":", 1)[0] for c in connections})
    wrong = [a for a in local if a != net.address]
    if wrong:
        return verdict(
            "cluster.rendezvous.gloo",
            node,
            FAIL,
            code="CLUSTER_WRONG_INTERFACE",
            said=f"gloo's connections left from {', '.join(wrong)}, not the cluster address {net.address}",
            evidence=evidence,
        )
    return verdict(
        "cluster.rendezvous.gloo",
        node,
        PASS,
        value=gloo.get("seconds"),
        unit="s",
        said=f"all-reduce correct; {len(connections)} connection(s) from {net.address} ({net.interface})",
        evidence=evidence,
    )


def _gpu(node: str, rank: dict[str, Any], torchrun: dict[str, Any], net: NodeNet) -> CheckResult:
    gpu = rank.get("gpu") or {}
    if not gpu and rank.get("error"):  # gloo finished, then the GPU's backend raised: not "no GPU"
        return verdict(
            "cluster.rendezvous.rccl",
            node,
            FAIL,
            code="CLUSTER_RCCL_FAILED",
            said=str(rank["error"]).splitlines()[0][:400],
            evidence={"nccl_lines": torchrun.get("nccl_lines"), "tail": (torchrun.get("tail") or [])[-15:]},
        )
    if not gpu.get("ran"):
        return verdict(
            "cluster.rendezvous.rccl",
            node,
            SKIP,
            code="CLUSTER_NO_GPU",
            said=str(gpu.get("reason") or "no GPU"),
        )
    used = nccl_interfaces(torchrun.get("nccl_lines") or [])
    evidence = {"nccl": used, "gpu": gpu}
    if gpu.get("wrong"):
        return verdict(
            "cluster.rendezvous.rccl",
            node,
            FAIL,
            code="CLUSTER_WRONG_RESULT",
            said="the element came back wrong",
            evidence=evidence,
        )
    names = [n for transport, names in used.items() if transport != "NET/IB" for n in names]
    wrong = [n for n in names if n != net.interface]
    if not used:
        return verdict(
            "cluster.rendezvous.rccl",
            node,
            PASS,
            said="one element reduced correctly; NCCL_DEBUG named no "
            "network interface (every rank on one node?)",
            evidence=evidence,
        )
    if wrong:
        return verdict(
            "cluster.rendezvous.rccl",
            node,
            FAIL,
            code="CLUSTER_WRONG_INTERFACE",
            said=f"RCCL/NCCL used {', '.join(wrong)}, not the cluster NIC {net.interface}",
            evidence=evidence,
        )
    listed = "; ".join(f"{t} {', '.join(n)}" for t, n in used.items())
    return verdict(
        "cluster.rendezvous.rccl",
        node,
        PASS,
        said=f"one element reduced correctly over {listed}",
        evidence=evidence,
    )
