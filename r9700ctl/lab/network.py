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
