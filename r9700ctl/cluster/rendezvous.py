"""Phase 3's judge: did every node join one rendezvous, reduce correctly, and over the cluster NIC?

Per node: `cluster.rendezvous.join` (its torchrun joined and its worker got a process group),
`cluster.rendezvous.gloo` (the gloo all-reduce's result, and the local address of every TCP
connection the worker held to a peer: each must be the node's cluster address), and
`cluster.rendezvous.rccl` (one element through RCCL/NCCL, and the transport and interface
NCCL_DEBUG=INFO says it took; SKIP where torch sees no GPU, the backend being chosen by the GPU).

The transport is NCCL's own line "Using network Socket|IB|<plugin>" (NVIDIA/nccl and ROCm/rccl
src/init.cc: INFO(NCCL_INIT, "Using network %s", ...), printed once per communicator; RCCL's as
posted in ROCm/rccl#419, NCCL's in NVIDIA/nccl-tests#185). With r9700_cluster_rdma=roce anything but
an IB network (the internal "IB" or an "IBext" plugin) is a fallback to sockets, which NCCL takes
without an error when NET/IB finds no usable device (NVIDIA/nccl#958): FAIL, naming it. A run whose
output names no transport and no interface was not judged: INCONCLUSIVE, never a PASS.
"""

from __future__ import annotations

import re
from typing import Any

from r9700ctl.agent.result import FAIL, INCONCLUSIVE, PASS, SKIP, CheckResult
from r9700ctl.cluster.facts import NodeNet
from r9700ctl.cluster.verdicts import no_output, stopped, verdict

# NCCL_DEBUG=INFO lines naming the interfaces (NCCL/RCCL src/misc/socket.cc, transport/net_socket.cc,
# net_ib.cc): "NCCL INFO NET/Socket : Using [0]eth1:10.0.0.1<0>", "NCCL INFO Bootstrap : Using eth1:...",
# "NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [RO]; OOB eth1:...".
_USING = re.compile(r"(NET/Socket|NET/IB|Bootstrap)\s*:\s*Using\s+(.*)$")
_IFACE = re.compile(r"(?:\[\d+\])?([A-Za-z0-9_.\-]+):(\d+\.\d+\.\d+\.\d+|[0-9a-f:]+)")
_IB_DEVICE = re.compile(r"\[\d+\]([A-Za-z0-9_.\-]+):\d+/")
_OOB = re.compile(r"OOB\s+([A-Za-z0-9_.\-]+):")
_NETWORK = re.compile(r"NCCL INFO Using network (\S+)")
_NO_IB_DEVICE = "NET/IB : No device found"  # transport/net_ib.cc: NET/IB found nothing it can use


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


def nccl_network(lines: list[str]) -> str | None:
    """The network NCCL took ("Socket", "IB", "IBext_v8", ...): its "Using network X" line."""
    found = [m.group(1) for m in map(_NETWORK.search, lines) if m]
    return found[-1] if found else None


def is_rdma(network: str) -> bool:
    """NCCL's own IB transport (RoCE included: "mlx5_0:1/RoCE") or an IB plugin ("IBext", "IBext_v8")."""
    return network.upper().startswith("IB")


def judge(
    documents: dict[str, dict[str, Any] | None],
    errors: dict[str, str],
    nets: dict[str, NodeNet],
    rdma: dict[str, Any] | None = None,
    timed_out: set[str] | frozenset[str] = frozenset(),
) -> list[CheckResult]:
    """`rdma`: the inventory's RDMA settings (mode off|roce, hca); `timed_out`: the nodes whose
    phase program the phase's wall clock stopped (no document)."""
    results: list[CheckResult] = []
    for node in sorted(nets):
        document = documents.get(node)
        if document is None:
            said = errors.get(node) or "the rendezvous program wrote nothing"
            results.append(no_output("cluster.rendezvous.join", node, said, node in timed_out))
            continue
        results += judge_node(node, document, nets[node], rdma)
    return results


def judge_node(
    node: str, document: dict[str, Any], net: NodeNet, rdma: dict[str, Any] | None = None
) -> list[CheckResult]:
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
            "CLUSTER_PHASE_TIMEOUT"
            if torchrun.get("timed_out") and failed_rank is None
            else "CLUSTER_COLLECTIVE_TIMEOUT"
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
    results.append(_gpu(node, ranks[0], torchrun, net, rdma or {}))
    return results


def _why(torchrun: dict[str, Any], failed_rank: dict[str, Any] | None) -> str:
    if failed_rank is not None:
        return str(failed_rank["error"]).splitlines()[0][:400]
    if torchrun.get("timed_out"):
        return f"torchrun {stopped(torchrun)} (a peer that never joined, or a hung collective?)"
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


def _gpu(
    node: str, rank: dict[str, Any], torchrun: dict[str, Any], net: NodeNet, rdma: dict[str, Any]
) -> CheckResult:
    check = "cluster.rendezvous.rccl"
    gpu = rank.get("gpu") or {}
    lines = [str(line) for line in torchrun.get("nccl_lines") or []]
    if not gpu and rank.get("error"):  # gloo finished, then the GPU's backend raised: not "no GPU"
        return verdict(
            check,
            node,
            FAIL,
            code="CLUSTER_RCCL_FAILED",
            said=str(rank["error"]).splitlines()[0][:400],
            evidence={"nccl_lines": lines, "tail": (torchrun.get("tail") or [])[-15:]},
        )
    if not gpu.get("ran"):
        return verdict(check, node, SKIP, code="CLUSTER_NO_GPU", said=str(gpu.get("reason") or "no GPU"))
    used, network = nccl_interfaces(lines), nccl_network(lines)
    evidence = {"nccl": used, "network": network, "gpu": gpu, "nccl_lines": lines}
    if gpu.get("wrong"):
        return verdict(
            check,
            node,
            FAIL,
            code="CLUSTER_WRONG_RESULT",
            said="the element came back wrong",
            evidence=evidence,
        )
    if not used and network is None:
        return verdict(
            check,
            node,
            INCONCLUSIVE,
            code="CLUSTER_TRANSPORT_UNSEEN",
            said="one element reduced correctly, but NCCL_DEBUG=INFO printed no 'Using network' and no "
            "interface line: the transport and interface RCCL took were not judged",
            evidence={**evidence, "tail": (torchrun.get("tail") or [])[-15:]},
        )
    roce = str(rdma.get("mode") or "off") == "roce"
    if roce:
        verdict_roce = _roce(node, used, network, net, rdma, lines, evidence)
        if verdict_roce is not None:
            return verdict_roce
    names = [n for transport, names in used.items() if transport != "NET/IB" for n in names]
    if roce:  # over RDMA the sockets are NET/IB's out-of-band ones: they too belong on the cluster NIC
        names += [n for n in used.get("NET/IB", []) if n in _oob_names(lines)]
    wrong = [n for n in dict.fromkeys(names) if n != net.interface]
    if wrong:
        return verdict(
            check,
            node,
            FAIL,
            code="CLUSTER_WRONG_INTERFACE",
            said=f"RCCL/NCCL used {', '.join(wrong)}, not the cluster NIC {net.interface}",
            evidence=evidence,
        )
    listed = "; ".join(f"{t} {', '.join(n)}" for t, n in used.items())
    over = f"network {network}" + (f" ({listed})" if listed else "") if network else listed
    return verdict(check, node, PASS, said=f"one element reduced correctly over {over}", evidence=evidence)


def _oob_names(lines: list[str]) -> set[str]:
    return {m.group(1) for line in lines if "NET/IB" in line for m in _OOB.finditer(line)}


def _roce(
    node: str,
    used: dict[str, list[str]],
    network: str | None,
    net: NodeNet,
    rdma: dict[str, Any],
    lines: list[str],
    evidence: dict[str, Any],
) -> CheckResult | None:
    """With r9700_cluster_rdma=roce: a FAIL where RCCL did not take RDMA, or took another HCA than the
    inventory names; INCONCLUSIVE where it did not say which network; None where RDMA is as configured."""
    check = "cluster.rendezvous.rccl"
    if network is None:
        named = "; ".join(f"{t} {', '.join(n)}" for t, n in used.items())
        return verdict(
            check,
            node,
            INCONCLUSIVE,
            code="CLUSTER_TRANSPORT_UNSEEN",
            said=f"NCCL_DEBUG=INFO named interfaces ({named}) but no 'Using network' line: whether RCCL "
            "took RDMA (r9700_cluster_rdma=roce) was not judged",
            evidence=evidence,
        )
    if not is_rdma(network):
        sockets = ", ".join(used.get("NET/Socket") or []) or "an unnamed interface"
        why = "; NET/IB said: No device found" if any(_NO_IB_DEVICE in line for line in lines) else ""
        return verdict(
            check,
            node,
            FAIL,
            code="CLUSTER_RDMA_FALLBACK",
            said=f"RCCL fell back to NET/{network} over {sockets} although r9700_cluster_rdma is roce{why}",
            evidence=evidence,
        )
    devices = _IB_DEVICE.findall(" ".join(line for line in lines if "NET/IB" in line))
    hca = str(rdma.get("hca") or "").split(":")[0]
    if hca and devices and hca not in devices:
        return verdict(
            check,
            node,
            FAIL,
            code="CLUSTER_WRONG_INTERFACE",
            said=f"RCCL's NET/IB took {', '.join(devices)}, not r9700_cluster_rdma_hca {rdma.get('hca')} "
            f"(the HCA of {net.interface})",
            evidence=evidence,
        )
    return None
