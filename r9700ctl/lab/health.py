"""`lab status`: which parts of a lab run, probed from the host (needs no root)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from r9700ctl.agent import schemas
from r9700ctl.lab import network, node, processes, state
from r9700ctl.lab.naming import LabNames

STATUS_SCHEMA = schemas.LAB_STATUS


@dataclass
class ComponentStatus:
    name: str  # bridge, mirror, proxy, node1 ...
    state: str  # up | down
    detail: str


@dataclass
class LabStatus:
    directory: Path
    exists: bool
    phase: str = "absent"  # absent | starting | up
    lab_id: int | None = None
    subnet: str = ""
    components: list[ComponentStatus] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        return self.exists and self.phase == "up" and all(c.state == "up" for c in self.components)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": STATUS_SCHEMA,
            "directory": str(self.directory),
            "exists": self.exists,
            "phase": self.phase,
            "healthy": self.healthy,
            "lab_id": self.lab_id,
            "subnet": self.subnet,
            "components": [vars(c) for c in self.components],
        }


def probe(directory: Path) -> LabStatus:
    lab = state.load(directory)
    if lab is None:
        return LabStatus(directory=directory, exists=False)
    names = LabNames(lab.lab_id)
    marker = f"{directory}/"  # a recorded PID counts only while it is still our process
    result = LabStatus(
        directory=directory, exists=True, phase=lab.phase, lab_id=lab.lab_id, subnet=names.subnet
    )
    bridge_up = lab.bridge_ifindex is not None and network.link_ifindex(names.bridge) == lab.bridge_ifindex
    result.components.append(
        ComponentStatus("bridge", "up" if bridge_up else "down", f"{names.bridge} {names.host_address}/24")
    )
    for label, pid, port in (
        ("mirror", lab.mirror_pid, lab.mirror_port),
        ("proxy", lab.proxy_pid, lab.proxy_port),
        ("registry", lab.registry_pid, lab.registry_port),
    ):
        url = f"http://{names.host_address}:{port}"
        if not processes.verified(pid, marker):
            result.components.append(ComponentStatus(label, "down", f"{url}: process {pid} is gone"))
        elif not processes.port_open(names.host_address, port):
            result.components.append(ComponentStatus(label, "down", f"{url}: nothing listens"))
        else:
            result.components.append(ComponentStatus(label, "up", f"{url} (pid {pid})"))
    namespaces = network.netns_names()
    for entry in lab.nodes:
        result.components.append(_node_status(entry, namespaces, processes.verified(entry.pid, marker)))
    return result


def _node_status(entry: state.NodeState, namespaces: list[str], unshare: int | None) -> ComponentStatus:
    where = entry.address
    if entry.netns not in namespaces:
        return ComponentStatus(entry.name, "down", f"{where}: network namespace {entry.netns} is gone")
    first = node.pid1(unshare)
    if first is None:
        return ComponentStatus(entry.name, "down", f"{where}: not running")
    if not entry.options.get("sshd", True):
        return ComponentStatus(entry.name, "up", f"{where}: running without sshd (node option), pid {first}")
    if not processes.port_open(entry.address, 22):
        return ComponentStatus(entry.name, "down", f"{where}: sshd does not answer (pid {first})")
    return ComponentStatus(entry.name, "up", f"{where}: sshd answers, pid {first}")
