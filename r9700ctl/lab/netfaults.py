"""Faults of the cluster network that `lab up --cluster-network --fault NODE=NAME` plants.

Each is the lab's stand-in for a failure owners hit between real nodes (sources beside each), made
the way the real one happens: on the node's own interfaces, routes, firewall and /etc/hosts, from
the host with `ip netns exec` (a node's /proc/sys is read-only from inside). `phase` and `code` say
which phase of `r9700ctl validate --cluster` must find it and the reason code it must name.
"""

from __future__ import annotations

from dataclasses import dataclass

from r9700ctl.lab import network, processes
from r9700ctl.lab.hostcheck import tool
from r9700ctl.lab.naming import LabNames

# The c10d rendezvous port torchrun uses by default (torch.distributed.run --rdzv-endpoint: "port
# 29400 if not specified"), the one port the firewall-drop fault leaves open.
RENDEZVOUS_PORT = 29400
# A jumbo MTU on one node's cluster NIC while the switch (the bridge's other ports) stays at 1500.
JUMBO_MTU = 9000
FIREWALL_TABLE = "r9700ctl_lab_fault"
LINK_TABLE = "r9700ctl_lab_link_fault"  # link-drop's own table, so removing it leaves firewall-drop's


@dataclass(frozen=True)
class NetFault:
    name: str
    what: str
    phase: str  # the phase of validate --cluster that must find it
    code: str  # the reason code it must carry


NET_FAULTS: dict[str, NetFault] = {
    f.name: f
    for f in (
        # One bad cable or port drags every collective down (issue 21; a node shaped with tc tbf
        # measured 0.01 GB/s with both partners in the research lab).
        NetFault("slow-link", f"the node's cluster link carries {network.SLOW_LINK_MBIT} Mbit/s "
                 f"of the network's {network.CLUSTER_LINK_MBIT}", "network", "CLUSTER_BANDWIDTH_LOW"),
        # Different MTUs between servers (NVIDIA/nccl#1524): large frames are dropped at the switch.
        NetFault("mtu-mismatch", f"the node's cluster NIC is at MTU {JUMBO_MTU}, the others and the "
                 "switch at 1500", "facts", "CLUSTER_MTU_MISMATCH"),
        # The rendezvous gets through, then the collective's sockets are dropped (NVIDIA/nccl#352,
        # NVIDIA/nccl-tests#162).
        NetFault("firewall-drop", f"nftables drops new TCP connections to the node's cluster NIC "
                 f"except port {RENDEZVOUS_PORT}", "network", "CLUSTER_PORTS_BLOCKED"),
        # Debian's installer maps the host name to 127.0.1.1 (Debian Reference 5.1.1); gloo then
        # binds to loopback ("Gloo connectFullMesh failed", vllm-project/vllm#7074, pytorch/gloo#70).
        NetFault("hostname-loopback", "/etc/hosts maps the node's name to 127.0.1.1", "facts",
                 "CLUSTER_HOSTNAME_LOOPBACK"),
        # A Docker network created over the cluster's addresses takes the route to the peers.
        NetFault("decoy-route", "a route sends the cluster subnet's first half through the Docker-style "
                 f"bridge {network.DECOY_BRIDGE}", "facts", "CLUSTER_ROUTE_NOT_CLUSTER_IF"),
        # One path between two nodes broken while each reaches every other node: a switch ACL, a
        # trunk or a routed hop that drops that pair's traffic only (issue 21: "two nodes that fail
        # only with each other point to their link"). Planted on node N against node N+1's cluster
        # address, so the fault is one link and neither node's own NIC.
        NetFault("link-drop", "nftables on the node drops every packet to and from the next node's "
                 "cluster address (the link between node N and node N+1, nothing else)", "network",
                 "CLUSTER_LINK_BLAMED"),
    )
}  # fmt: skip


def plant(names: LabNames, index: int, fault: str) -> None:
    """Plant `fault` on node `index` (its cluster link exists); hostname-loopback is in node.py."""
    ns, veth = names.netns(index), names.cluster_veth(index)
    if fault == "slow-link":
        network.shape(veth, network.SLOW_LINK_MBIT)
        network.shape(network.CLUSTER_IFNAME, network.SLOW_LINK_MBIT, netns=ns)
    elif fault == "mtu-mismatch":
        for argv in (
            ["link", "set", veth, "mtu", str(JUMBO_MTU)],
            ["-n", ns, "link", "set", network.CLUSTER_IFNAME, "mtu", str(JUMBO_MTU)],
        ):
            processes.run([tool("ip"), *argv], what=f"plant {fault} on node{index}", timeout=30)  # fmt: skip
    elif fault == "firewall-drop":
        rules = (
            f"table inet {FIREWALL_TABLE} {{\n"
            "  chain input {\n"
            "    type filter hook input priority 0; policy accept;\n"
            f'    iifname "{network.CLUSTER_IFNAME}" tcp dport != {RENDEZVOUS_PORT} ct state new drop\n'
            "  }\n"
            "}\n"
        )
        processes.run(
            [tool("ip"), "netns", "exec", ns, tool("nft"), "-f", "-"],
            what=f"plant {fault} on node{index} (nft)",
            stdin_data=rules.encode(),
            timeout=30,
        )
    elif fault == "link-drop":
        partner = names.cluster_address(index + 1)
        rules = (
            f"table inet {LINK_TABLE} {{\n"
            "  chain input {\n"
            "    type filter hook input priority 0; policy accept;\n"
            f"    ip saddr {partner} drop\n"
            "  }\n"
            "  chain output {\n"
            "    type filter hook output priority 0; policy accept;\n"
            f"    ip daddr {partner} drop\n"
            "  }\n"
            "}\n"
        )
        processes.run(
            [tool("ip"), "netns", "exec", ns, tool("nft"), "-f", "-"],
            what=f"plant {fault} on node{index} (nft, against node{index + 1})",
            stdin_data=rules.encode(),
            timeout=30,
        )
    elif fault == "decoy-route":
        first_half = f"{names.cluster_subnet.rsplit('.', 1)[0]}.0/25"
        processes.run(
            [tool("ip"), "-n", ns, "route", "add", first_half, "dev", network.DECOY_BRIDGE],
            what=f"plant {fault} on node{index}",
            timeout=30,
        )


def remove_link_drop(names: LabNames, index: int) -> None:
    """Take link-drop off node `index` again (its table alone: another fault's rules stay)."""
    processes.run(
        [tool("ip"), "netns", "exec", names.netns(index), tool("nft"), "delete", "table", "inet", LINK_TABLE],
        what=f"remove link-drop from node{index}",
        timeout=30,
    )
