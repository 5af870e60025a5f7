"""The lab network: one bridge on the host, one network namespace + veth pair per node."""

from __future__ import annotations

import json
import subprocess

from r9700ctl.lab import processes
from r9700ctl.lab.hostcheck import tool
from r9700ctl.lab.naming import LabNames, octet_of

# A made-up locally administered MAC: packets to the unused address leave on the bridge and
# nobody answers, so a connection there times out like one to a powered-off server.
NOBODY_MAC = "02:00:00:00:97:00"


def _ip(*args: str, what: str) -> str:
    return processes.run([tool("ip"), *args], what=what, timeout=30)


def _ip_json(*args: str) -> list[dict]:
    proc = subprocess.run([tool("ip"), "-j", *args], capture_output=True, check=False, timeout=30)
    try:
        return json.loads(proc.stdout or b"[]")
    except ValueError:
        return []


def netns_names() -> list[str]:
    proc = subprocess.run(
        [tool("ip"), "netns", "list"], capture_output=True, text=True, check=False, timeout=30
    )
    return [line.split()[0] for line in proc.stdout.splitlines() if line.strip()]


def link_names() -> list[str]:
    return [link.get("ifname", "") for link in _ip_json("link", "show")]


def link_ifindex(name: str) -> int | None:
    """The interface's index (unique within a boot: the kernel does not hand one out twice)."""
    for link in _ip_json("link", "show", "dev", name) if name in link_names() else []:
        return link.get("ifindex")
    return None


def used_octets() -> set[int]:
    """10.213.X networks the host already has an address or a route in."""
    octets = set()
    for link in _ip_json("-4", "addr", "show"):
        for info in link.get("addr_info", []):
            octets.add(octet_of(info.get("local", "")))
    for route in _ip_json("-4", "route", "show", "table", "all"):
        octets.add(octet_of(route.get("dst", "")))
    octets.discard(None)
    return {o for o in octets if o is not None}


def create_bridge(names: LabNames) -> None:
    _ip("link", "add", names.bridge, "type", "bridge", what="create the lab bridge")
    _ip("addr", "add", f"{names.host_address}/24", "dev", names.bridge, what="address the lab bridge")
    _ip("link", "set", names.bridge, "up", what="bring the lab bridge up")
    _ip(
        "neigh",
        "replace",
        names.unused_address,
        "lladdr",
        NOBODY_MAC,
        "dev",
        names.bridge,
        "nud",
        "permanent",
        what="reserve the unused address",
    )


def add_node_link(names: LabNames, index: int) -> None:
    """Network namespace with lo + eth0 (address .10+index, default route via the bridge)."""
    ns, veth, address = names.netns(index), names.veth(index), names.node_address(index)
    what = f"network of node{index}"
    _ip("netns", "add", ns, what=what)
    _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns, what=what)
    _ip("link", "set", veth, "master", names.bridge, "up", what=what)
    _ip("-n", ns, "link", "set", "lo", "up", what=what)
    _ip("-n", ns, "addr", "add", f"{address}/24", "dev", "eth0", what=what)
    _ip("-n", ns, "link", "set", "eth0", "up", what=what)
    _ip("-n", ns, "route", "add", "default", "via", names.host_address, what=what)


def netns_pids(ns: str) -> list[int]:
    proc = subprocess.run(
        [tool("ip"), "netns", "pids", ns], capture_output=True, text=True, check=False, timeout=30
    )
    return [int(p) for p in proc.stdout.split() if p.isdigit()]


def delete_netns(ns: str) -> bool:
    proc = subprocess.run([tool("ip"), "netns", "delete", ns], capture_output=True, check=False, timeout=30)
    return proc.returncode == 0


def delete_link(name: str) -> bool:
    proc = subprocess.run([tool("ip"), "link", "delete", name], capture_output=True, check=False, timeout=30)
    return proc.returncode == 0


def lab_netns(names: LabNames) -> list[str]:
    return [ns for ns in netns_names() if names.owns_name(ns)]


def lab_links(names: LabNames) -> list[str]:
    return [link for link in link_names() if names.owns_name(link)]


# --- the cluster network (`lab up --cluster-network`) ------------------------------------------------

# The node end of the cluster veth: the cluster NIC as the node sees it.
CLUSTER_IFNAME = "eth1"
# What the lab's cluster links carry: every cluster veth is shaped to this rate in both directions
# (tc tbf), so the network stands in for a switch whose figures a loaded 2-core lab host still
# delivers steadily (at 1 Gbit/s, healthy pairs measured 0.67-0.95 of it while other labs ran);
# veth itself reports 10000 Mb/s to ethtool whatever it carries, so the lab's inventory states the
# rate (r9700_cluster_line_rate_mbps). The slow-link fault shapes one node's links to SLOW_LINK_MBIT.
CLUSTER_LINK_MBIT = 500
SLOW_LINK_MBIT = 50
# A Docker-style bridge on every node, as `docker network create` leaves one (br-<network id>, the
# first user-defined network at 172.18.0.1/16: Docker's default address pools start at 172.17 for
# docker0, https://docs.docker.com/engine/network/drivers/bridge/): the same address on every node
# and UP, the interface NCCL's automatic choice takes when nobody names one (ROCm/legacy-rocm-build#6074).
DECOY_BRIDGE = "br-9e1f3c5a7b2d"
DECOY_PORT = "veth9e1f3c5"
DECOY_ADDRESS = "172.18.0.1/16"


def shape(device: str, mbit: int, netns: str | None = None) -> None:
    """Limit what leaves `device` to `mbit` Mbit/s (token bucket holding 10 ms of traffic)."""
    prefix = ["-n", netns] if netns else []
    # tc-tbf(8): "If your buffer is too small, packets may be dropped because more tokens arrive per
    # timer tick than fit in your bucket". A bucket of 1 ms reached the rate on an idle host and
    # 0.3-0.8 of it on a loaded one (timer ticks come late); 10 ms keeps the rate under load.
    burst_kb = max(64, mbit * 10 // 8)
    processes.run(
        [tool("tc"), *prefix, "qdisc", "replace", "dev", device, "root", "tbf", "rate", f"{mbit}mbit",
         "burst", f"{burst_kb}kb", "latency", "100ms"],
        what=f"shape {device} to {mbit} Mbit/s",
        timeout=30,
    )  # fmt: skip


def create_cluster_bridge(names: LabNames) -> None:
    """The cluster network's switch: a bridge with no host address (the controller never joins it)."""
    _ip("link", "add", names.cluster_bridge, "type", "bridge", what="create the cluster bridge")
    _ip("link", "set", names.cluster_bridge, "up", what="bring the cluster bridge up")


def add_node_cluster_link(names: LabNames, index: int, mbit: int = CLUSTER_LINK_MBIT) -> None:
    """eth1 in node `index`'s namespace on the cluster bridge, shaped both ways; plus the decoy bridge."""
    ns, veth, address = names.netns(index), names.cluster_veth(index), names.cluster_address(index)
    what = f"cluster network of node{index}"
    _ip("link", "add", veth, "type", "veth", "peer", "name", CLUSTER_IFNAME, "netns", ns, what=what)
    _ip("link", "set", veth, "master", names.cluster_bridge, "up", what=what)
    _ip("-n", ns, "addr", "add", f"{address}/24", "dev", CLUSTER_IFNAME, what=what)
    _ip("-n", ns, "link", "set", CLUSTER_IFNAME, "up", what=what)
    shape(veth, mbit)  # towards the node
    shape(CLUSTER_IFNAME, mbit, netns=ns)  # from the node
    # The decoy: a bridge with one veth port (so it has carrier, as Docker's do with a container).
    _ip("-n", ns, "link", "add", DECOY_BRIDGE, "type", "bridge", what=what)
    _ip("-n", ns, "link", "add", DECOY_PORT, "type", "veth", "peer", "name", f"{DECOY_PORT}p", what=what)
    _ip("-n", ns, "link", "set", DECOY_PORT, "master", DECOY_BRIDGE, "up", what=what)
    _ip("-n", ns, "link", "set", f"{DECOY_PORT}p", "up", what=what)
    _ip("-n", ns, "addr", "add", DECOY_ADDRESS, "dev", DECOY_BRIDGE, what=what)
    _ip("-n", ns, "link", "set", DECOY_BRIDGE, "up", what=what)
