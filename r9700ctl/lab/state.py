"""DIR/lab.json: what a lab made, so `down` can remove exactly that (also after an aborted `up`)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from r9700ctl.agent import schemas
from r9700ctl.agent.atomic import write_atomic
from r9700ctl.errors import BadInput

SCHEMA = schemas.LAB
STATE_FILE = "lab.json"

# Entries a lab creates inside DIR; `down` removes these and nothing else, so a DIR that
# also holds the user's own files keeps them.
LAB_ENTRIES = (
    "lab.json",
    "lab.json.tmp",
    "inventory.ini",
    "inventory.ini.tmp",
    "ssh_config",
    "ssh_config.tmp",
    "known_hosts",
    "known_hosts.tmp",
    "id_ed25519",
    "id_ed25519.pub",
    "cm",
    "nodes",
    "mirror",
    "gnupg",
    "acng",
    "logs",
    "registry",
)


@dataclass
class NodeState:
    name: str
    index: int
    address: str
    netns: str
    veth: str
    options: dict[str, bool | str | None]
    pid: int | None = None  # the `ip netns exec ... unshare` process; its child is the node's PID 1
    cgroups: list[str] = field(default_factory=list)  # the node's own cgroups (r9700ctl/lab/dockerd.py)


@dataclass
class LabState:
    directory: str
    lab_id: int
    phase: str = "starting"  # starting -> up; `down` removes lab.json last
    # Kernel identity of what this lab made: after a reboot (another boot id) none of it can
    # exist, and a bridge of the same name with another ifindex belongs to a newer lab.
    boot_id: str = ""
    bridge_ifindex: int | None = None
    gpus: int = 4
    recordings: str | None = None
    debian_mirror: str = ""
    debian_url: str = ""  # the nodes' cut of Debian on the lab mirror ("": the whole of debian_mirror)
    rootfs_cache: str = ""
    base: str = ""  # the shared, read-only lower layer of every node's overlay
    control_dir: str = ""
    mirror_port: int = 8080
    proxy_port: int = 3142
    mirror_pid: int | None = None
    proxy_pid: int | None = None
    registry_port: int = 5000
    registry_pid: int | None = None
    registry_storage: str = ""  # the cached storage of the stand-in image (r9700ctl/lab/registry.py)
    key_fingerprint: str = ""
    # `lab up --cluster-network`: a cluster bridge, eth1 per node, torch bound into the nodes.
    cluster: bool = False
    torch_site: str = ""  # the host directory bound read-only into each node (r9700ctl/lab/torchsite.py)
    nodes: list[NodeState] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)

    def node(self, name_or_address: str) -> NodeState:
        for node in self.nodes:
            if name_or_address in (node.name, node.address):
                return node
        known = ", ".join(n.name for n in self.nodes) or "none"
        raise BadInput(what=f"no lab node '{name_or_address}'", hint=f"nodes of this lab: {known}")

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data = {"schema": SCHEMA, **data}
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LabState:
        data = dict(data)
        data.pop("schema", None)
        nodes = [NodeState(**n) for n in data.pop("nodes", [])]
        return cls(nodes=nodes, **data)


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def state_path(directory: Path) -> Path:
    return directory / STATE_FILE


def load(directory: Path) -> LabState | None:
    path = state_path(directory)
    if not path.is_file():
        return None
    try:
        return LabState.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (ValueError, TypeError, KeyError) as exc:
        raise BadInput(
            what=f"unreadable lab state ({exc})",
            where=str(path),
            hint="remove the lab's leftovers by hand (see docs/lab.md, 'Cleanup') and delete the file",
        ) from exc


def save(state: LabState) -> None:
    """Write lab.json atomically: a crash mid-write must not lose the record of what exists."""
    write_atomic(state_path(Path(state.directory)), json.dumps(state.to_json(), indent=2) + "\n")
