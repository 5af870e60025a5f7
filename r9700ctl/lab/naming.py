"""Names and addresses of one lab, all derived from its lab id.

Several labs may run on one machine at once (parallel test sessions), so every host-visible
name (bridge, network namespaces, veth ends) and the subnet come from a small integer id that
is unique on the host while the lab exists. Interface names must stay <= 15 characters (IFNAMSIZ).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from r9700ctl.errors import CannotRun

SUBNET_BASE = "10.213"  # labs use 10.213.<lab id>.0/24: private space, only inside namespaces we create
# `lab up --cluster-network`: a second network between the nodes (the cluster's data network,
# as beside a management network), 10.214.<lab id>.0/24 on its own bridge.
CLUSTER_BASE = "10.214"
FIRST_NODE_HOST = 10  # node i gets .(10 + i); the host side of the bridge is .1
UNUSED_HOST = 250  # .250 is never given to a node: "an address with nothing behind it"
MAX_NODES = 200  # node addresses .11 to .210 stay below UNUSED_HOST
IFNAMSIZ = 15
# The name every node resolves to the lab host's side of its bridge (/etc/hosts, node.hosts_file).
# The URLs the nodes are given (mirror, registry, the apt pin's origin) use it instead of the
# lab's own address, so what provision writes on a node is the same in every lab: a provisioned
# node's snapshot (r9700ctl/lab/snapshot.py) fits a lab of any id.
HOST_NAME = "lab-host"
# The name the nodes reach the lab's cut of Debian by (r9700ctl/lab/debian_subset.py), on the same
# address and mirror: a host of its own, so r9700_repos's apt pin (`Pin: origin "lab-host"`) leaves
# Debian's packages alone, as on a real node where they come from another host than AMD's.
DEBIAN_HOST_NAME = "lab-debian"


@dataclass(frozen=True)
class LabNames:
    lab_id: int

    @property
    def prefix(self) -> str:
        return f"r97l{self.lab_id}"

    @property
    def bridge(self) -> str:
        return f"{self.prefix}br"

    def netns(self, index: int) -> str:
        return f"{self.prefix}n{index}"

    def veth(self, index: int) -> str:
        """The host end of node `index`'s veth pair (the node end is always eth0)."""
        return f"{self.prefix}v{index}"

    @property
    def subnet(self) -> str:
        return f"{SUBNET_BASE}.{self.lab_id}.0/24"

    @property
    def host_address(self) -> str:
        return f"{SUBNET_BASE}.{self.lab_id}.1"

    def node_address(self, index: int) -> str:
        if not 1 <= index <= MAX_NODES:
            raise ValueError(f"node index {index} outside 1..{MAX_NODES}")
        return f"{SUBNET_BASE}.{self.lab_id}.{FIRST_NODE_HOST + index}"

    @property
    def unused_address(self) -> str:
        return f"{SUBNET_BASE}.{self.lab_id}.{UNUSED_HOST}"

    @property
    def cluster_bridge(self) -> str:
        return f"{self.prefix}cb"

    def cluster_veth(self, index: int) -> str:
        """The host end of node `index`'s cluster veth pair (the node end is always eth1)."""
        return f"{self.prefix}c{index}"

    @property
    def cluster_subnet(self) -> str:
        return f"{CLUSTER_BASE}.{self.lab_id}.0/24"

    def cluster_address(self, index: int) -> str:
        if not 1 <= index <= MAX_NODES:
            raise ValueError(f"node index {index} outside 1..{MAX_NODES}")
        return f"{CLUSTER_BASE}.{self.lab_id}.{FIRST_NODE_HOST + index}"

    def owns_name(self, name: str) -> bool:
        """True for a netns or link name this lab would create (r97l5br, r97l5n1, r97l5v12, and
        with a cluster network r97l5cb, r97l5c3)."""
        rest = name[len(self.prefix) :] if name.startswith(self.prefix) else None
        if rest is None:
            return False
        return rest in ("br", "cb") or (len(rest) > 1 and rest[0] in "nvc" and rest[1:].isdigit())


def choose_lab_id(used_octets: Iterable[int], used_names: Iterable[str]) -> int:
    """The smallest lab id whose subnet and names nothing on the host uses yet.

    used_octets: third octets of 10.213.X.0/24 networks seen in addresses or routes;
    used_names: existing link and netns names (a stale lab's names block its id too).
    """
    octets = set(used_octets)
    names = list(used_names)
    for lab_id in range(1, 255):
        if lab_id in octets:
            continue
        candidate = LabNames(lab_id)
        if any(candidate.owns_name(name) for name in names):
            continue
        return lab_id
    raise CannotRun(
        what="no free lab subnet left in 10.213.0.0/16",
        hint="take labs down with `r9700ctl lab down --dir DIR`",
    )


def octet_of(address: str) -> int | None:
    """Third octet of an address or network inside 10.213.0.0/16, else None."""
    parts = address.split("/")[0].split(".")
    if len(parts) != 4 or ".".join(parts[:2]) != SUBNET_BASE:
        return None
    try:
        return int(parts[2])
    except ValueError:
        return None
