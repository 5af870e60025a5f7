"""Phase 1's judge: each node's cluster facts, and where nodes differ that must agree.

Input per node (NodeInput): what its facts program found (agent/cluster/netfacts.py), its routes to
the others' cluster addresses, and what the runtime said (torch, HIP, RCCL, GPUs, the image).
Agreement rules name the odd nodes out: the value most nodes share is the cluster's; a node with
another FAILs (MTU, interface name, versions) or WARNs (link speed, GPU count), the others named.
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from r9700ctl.agent.result import FAIL, INCONCLUSIVE, PASS, WARN, CheckResult
from r9700ctl.cluster.limits import ClusterLimits
from r9700ctl.cluster.verdicts import no_output, verdict

GIB = 2**30


@dataclass
class NodeInput:
    """What phase 1 brought back from one node (None: nothing came back)."""

    node: str
    facts: dict[str, Any] | None = None
    routes: dict[str, Any] | None = None
    runtime: dict[str, Any] = field(default_factory=dict)  # agent.json: runtime, image, torchinfo
    error: str = ""  # unreachable, or why the program wrote nothing
    timed_out: bool = False  # the phase's wall clock stopped the program


@dataclass
class NodeNet:
    """A node's cluster NIC as the later phases use it."""

    node: str
    interface: str | None
    address: str | None
    mtu: int | None
    speed_mbps: int | None  # what the NIC reports
    line_rate_mbps: int | None  # what is judged against: r9700_cluster_line_rate_mbps, else the speed
    gpus: int = 0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class FactsJudgement:
    results: list[CheckResult]
    nets: dict[str, NodeNet]  # the nodes that gave facts and have a cluster address

    @property
    def usable(self) -> list[str]:
        return sorted(self.nets)


def torch_of(node: NodeInput) -> dict[str, Any]:
    import json

    text = str(node.runtime.get("torchinfo") or "").strip().splitlines()
    try:
        found = json.loads(text[-1]) if text else {}
    except ValueError:
        found = {}
    return found if isinstance(found, dict) else {}


@dataclass(frozen=True)
class Agreement:
    """A fact the nodes must share: the odd node out gets `status` with `code`, the others named."""

    check: str
    value_of: Callable[[NodeInput, NodeNet | None], Any]  # None leaves the node out
    status: str
    code: str
    label: str
    describe: Callable[[Any], str] = str


# MTU, NIC name and versions FAIL; link speed and GPU count WARN. The NIC's figures where the node
# has a cluster NIC, the runtime's for every node that answered.
AGREEMENTS = (
    Agreement("cluster.facts.mtu", lambda n, net: net and net.mtu, FAIL, "CLUSTER_MTU_MISMATCH", "MTU"),
    Agreement("cluster.facts.interface", lambda n, net: net and net.interface, FAIL,
              "CLUSTER_IFNAME_MISMATCH", "cluster NIC"),
    Agreement("cluster.facts.speed", lambda n, net: net and net.speed_mbps, WARN,
              "CLUSTER_SPEED_MISMATCH", "link speed (Mb/s)"),
    Agreement("cluster.facts.versions", lambda n, net: _versions(n), FAIL, "CLUSTER_VERSION_MISMATCH",
              "versions", describe=lambda v: _describe_versions(v)),
    Agreement("cluster.facts.gpus", lambda n, net: torch_of(n).get("gpus"), WARN,
              "CLUSTER_GPU_COUNT_MISMATCH", "GPUs"),
)  # fmt: skip


def judge(
    nodes: list[NodeInput],
    network: str,
    limits: ClusterLimits,
    line_rate_mbps: dict[str, int | None],
    rdma: dict[str, Any] | None = None,
) -> FactsJudgement:
    results: list[CheckResult] = []
    present: list[NodeInput] = []
    for node in nodes:
        if node.facts is None:
            results.append(no_output("cluster.facts.node", node.node, node.error, node.timed_out))
        else:
            present.append(node)
    nets: dict[str, NodeNet] = {}
    for node in present:
        result, net = _address(node, network, line_rate_mbps.get(node.node), torch_of(node))
        results.append(result)
        if net is not None:
            nets[node.node] = net
    for node in present:
        if node.node in nets:
            results.append(_routes(node, nets))
    for rule in AGREEMENTS:
        values = {n.node: rule.value_of(n, nets.get(n.node)) for n in present}
        results += agreement(rule.check, values, rule.status, rule.code, rule.label, rule.describe)
    for node in present:
        results.append(_hostname(node, nets.get(node.node)))
        results.append(_clock(node, limits))
        if rdma and rdma.get("mode") == "roce":
            results += _rdma(node, nets.get(node.node), rdma, network)
    return FactsJudgement(results=results, nets=nets)


def _address(
    node: NodeInput, network: str, line_rate: int | None, torch: dict[str, Any]
) -> tuple[CheckResult, NodeNet | None]:
    facts = node.facts or {}
    ifname, address = facts.get("interface"), facts.get("address")
    if not ifname or not address:
        seen = ", ".join(
            f"{link.get('ifname')} {'/'.join(link.get('addresses') or []) or '-'}"
            for link in facts.get("interfaces") or []
        )
        return verdict(
            "cluster.facts.address",
            node.node,
            FAIL,
            code="CLUSTER_NO_ADDRESS",
            said=f"no address in {network} (interfaces: {seen or 'none read'})",
            evidence={"interfaces": facts.get("interfaces")},
        ), None
    nic = facts.get("nic") or {}
    net = NodeNet(
        node=node.node,
        interface=str(ifname),
        address=str(address),
        mtu=nic.get("mtu"),
        speed_mbps=nic.get("speed_mbps"),
        line_rate_mbps=line_rate or nic.get("speed_mbps"),
        gpus=int(torch.get("gpus") or 0),
    )
    said = (
        f"{ifname} {address}, MTU {net.mtu}, {net.speed_mbps or 'unknown'} Mb/s, driver {nic.get('driver')}"
    )
    return verdict(
        "cluster.facts.address",
        node.node,
        PASS,
        metric="interface",
        value=str(ifname),
        said=said,
        evidence={"nic": nic, "address": address},
    ), net


def _routes(node: NodeInput, nets: dict[str, NodeNet]) -> CheckResult:
    own = nets[node.node]
    routes = (node.routes or {}).get("routes")
    if not isinstance(routes, dict):
        return verdict(
            "cluster.facts.route",
            node.node,
            INCONCLUSIVE,
            code="CLUSTER_FACTS_MISSING",
            said="the routes to the other nodes were not read",
        )
    wrong = {
        peer: route.get("dev")
        for peer, route in sorted(routes.items())
        if peer in nets and peer != node.node and route.get("dev") != own.interface
    }
    if wrong:
        listed = ", ".join(
            f"{peer} ({nets[peer].address}) via {dev or 'no route'}" for peer, dev in wrong.items()
        )
        return verdict(
            "cluster.facts.route",
            node.node,
            FAIL,
            code="CLUSTER_ROUTE_NOT_CLUSTER_IF",
            said=f"traffic to {listed} leaves through another interface than {own.interface}",
            value=len(wrong),
            unit="peers",
            evidence={"routes": routes},
        )
    return verdict(
        "cluster.facts.route",
        node.node,
        PASS,
        value=len(routes),
        unit="peers",
        said=f"every peer through {own.interface}",
        evidence={"routes": routes},
    )


def agreement(
    check: str,
    values: dict[str, Any],
    status: str,
    code: str,
    label: str,
    describe: Callable[[Any], str] = str,
) -> list[CheckResult]:
    """One result per node: PASS where it has the value most nodes share, else `status` naming
    the others' values. Nodes without the value (None) are left out."""
    known = {node: value for node, value in values.items() if value is not None}
    if len(known) < 2:
        return []
    counts = Counter(describe(v) for v in known.values())
    common = sorted(counts, key=lambda text: (-counts[text], text))[0]
    results = []
    for node, value in sorted(known.items()):
        text = describe(value)
        if text == common:
            results.append(
                verdict(
                    check,
                    node,
                    PASS,
                    metric=label,
                    value=text if len(text) < 60 else None,
                    said=f"{label} {text}, as on every other node"
                    if len(counts) == 1
                    else f"{label} {text}, as on most nodes",
                )
            )
            continue
        others = sorted(n for n, v in known.items() if describe(v) == common)
        results.append(
            verdict(
                check,
                node,
                status,
                code=code,
                metric=label,
                value=text if len(text) < 60 else None,
                said=f"{label} {text} here, {common} on {', '.join(others)}",
                evidence={"values": {n: describe(v) for n, v in known.items()}},
            )
        )
    return results


def _versions(node: NodeInput) -> dict[str, Any] | None:
    torch = torch_of(node)
    facts = node.facts or {}
    found = {
        "torch": torch.get("torch"),
        "hip": torch.get("hip"),
        "cuda": torch.get("cuda"),
        "rccl": torch.get("nccl"),
        "rocm": (facts.get("versions") or {}).get("rocm"),
        "image": node.runtime.get("image") or None,
        # r9700-run --image-id: the build itself, so one tag pulled at two times reads as two images.
        "image_id": node.runtime.get("image_id") or None,
    }
    return found if any(found.values()) else None


def _describe_versions(value: dict[str, Any]) -> str:
    return ", ".join(f"{key} {text}" for key, text in value.items() if text) or "none"


def _hostname(node: NodeInput, net: NodeNet | None) -> CheckResult:
    info = (node.facts or {}).get("hostname") or {}
    name, addresses = info.get("name"), list(info.get("addresses") or [])
    evidence = {"hostname": info}
    if any(ipaddress.ip_address(a).is_loopback for a in addresses):
        return verdict(
            "cluster.facts.hostname",
            node.node,
            WARN,
            code="CLUSTER_HOSTNAME_LOOPBACK",
            said=f"{name} resolves to {', '.join(addresses)}",
            evidence=evidence,
        )
    if net is not None and net.address not in addresses:
        return verdict(
            "cluster.facts.hostname",
            node.node,
            WARN,
            code="CLUSTER_HOSTNAME_NOT_CLUSTER",
            said=f"{name} resolves to {', '.join(addresses) or 'nothing'} "
            f"({info.get('error') or 'not ' + str(net.address)})",
            evidence=evidence,
        )
    return verdict(
        "cluster.facts.hostname",
        node.node,
        PASS,
        said=f"{name} resolves to {', '.join(addresses)}",
        evidence=evidence,
    )


def _clock(node: NodeInput, limits: ClusterLimits) -> CheckResult:
    clock = (node.facts or {}).get("clock") or {}
    offset = clock.get("offset_s")
    evidence = {"clock": clock}
    if clock.get("synchronized") is False:
        return verdict(
            "cluster.facts.clock",
            node.node,
            WARN,
            code="CLUSTER_CLOCK_UNSYNCED",
            said=f"{clock.get('service')} says the clock is not synchronised",
            evidence=evidence,
        )
    if isinstance(offset, (int, float)) and abs(offset) > limits.clock_skew_warn_s:
        return verdict(
            "cluster.facts.clock",
            node.node,
            WARN,
            code="CLUSTER_CLOCK_SKEW",
            value=offset,
            unit="s",
            said=f"{clock.get('service')} reports the clock {offset:+.3f} s off its servers",
            threshold=f"|offset| <= {limits.clock_skew_warn_s:g} s",
            evidence=evidence,
        )
    service = clock.get("service")
    said = f"{service}: synchronised" if service else "no time service answered (the pairs compare clocks)"
    return verdict("cluster.facts.clock", node.node, PASS, said=said, evidence=evidence)


def _rdma(node: NodeInput, net: NodeNet | None, rdma: dict[str, Any], network: str) -> list[CheckResult]:
    results = [_memlock(node)]
    gids = (node.facts or {}).get("rdma") or []
    index = rdma.get("gid_index")
    subnet = ipaddress.ip_network(network, strict=False)
    good = [
        g
        for g in gids
        if str(g.get("type") or "").lower() == "roce v2"
        and (index is None or g.get("index") == index)
        and _gid_in(str(g.get("gid") or ""), subnet)
    ]
    if good:
        first = good[0]
        results.append(
            verdict(
                "cluster.facts.rdma",
                node.node,
                PASS,
                metric="gid_index",
                value=first.get("index"),
                said=f"{first.get('device')} port {first.get('port')} GID {first.get('index')} is "
                f"RoCE v2 on {network}",
                evidence={"gids": gids},
            )
        )
    else:
        where = f"index {index}" if index is not None else "any index"
        results.append(
            verdict(
                "cluster.facts.rdma",
                node.node,
                FAIL,
                code="CLUSTER_RDMA_GID_NOT_ROCEV2",
                said=f"no RoCE v2 GID on {network} at {where} of "
                f"{net.interface if net else 'the cluster NIC'}",
                evidence={"gids": gids},
            )
        )
    return results


def _memlock(node: NodeInput) -> CheckResult:
    """RDMA registers (locks) the buffers it moves; the job's RLIMIT_MEMLOCK must allow it. In the
    container runtime the job gets `--ulimit memlock=-1` from r9700-run --host-network
    (agent/container_run.py), whatever the host's limit; on the host, the host's limit is the job's."""
    check = "cluster.facts.memlock"
    if str(node.runtime.get("runtime") or "").strip() == "container":
        return verdict(
            check,
            node.node,
            PASS,
            said="the job runs in the image with memlock unlimited (r9700-run --host-network)",
        )
    memlock = ((node.facts or {}).get("memlock") or {}).get("soft_bytes")
    if not isinstance(memlock, int):
        return verdict(
            check,
            node.node,
            INCONCLUSIVE,
            code="CLUSTER_FACTS_MISSING",
            said="the memlock limit was not read",
        )
    if memlock == -1:
        return verdict(check, node.node, PASS, said="ulimit -l is unlimited")
    return verdict(
        check,
        node.node,
        WARN,
        code="CLUSTER_MEMLOCK_LIMITED",
        value=memlock,
        unit="bytes",
        said=f"ulimit -l is {memlock} bytes for a job on the host",
        threshold="unlimited with RDMA",
    )


def _gid_in(gid: str, subnet: ipaddress.IPv4Network | ipaddress.IPv6Network) -> bool:
    """An IPv4-mapped RoCE v2 GID (::ffff:a.b.c.d) inside the cluster subnet."""
    try:
        address = ipaddress.IPv6Address(gid)
    except ValueError:
        return False
    mapped = address.ipv4_mapped
    return mapped is not None and mapped in subnet
