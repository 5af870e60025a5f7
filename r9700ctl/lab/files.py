"""Text the lab writes for its users: inventory.ini, ssh_config, known_hosts (pure renderers)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

R9700_PCI = {"vendor": "0x1002", "device": "0x7551", "class": "0x030000", "revision": "0xc0"}
# The card's display-audio function (1002:ab40, docs/hardware.md); detection must skip it by class.
R9700_AUDIO = {"vendor": "0x1002", "device": "0xab40", "class": "0x040300", "revision": "0x00"}
# Subsystem of a Gigabyte R9700 as `lspci -vnn` printed it in clbr/radeontop#184: [1458:242f].
R9700_SUBSYSTEM = {"subsystem_vendor": "0x1458", "subsystem_device": "0x242f"}
# One GPU per root port, spread over the buses the way a 4- or 8-slot board enumerates them.
GPU_BUSES = (0x03, 0x23, 0x43, 0x63, 0x83, 0xA3, 0xC3, 0xE3)


@dataclass(frozen=True)
class InventoryNode:
    name: str
    address: str


def pci_devices(gpus: int) -> list[dict[str, str]]:
    """The stand-in PCI functions a lab node presents: per GPU the display and the audio function."""
    devices = []
    for index in range(gpus):
        bus = GPU_BUSES[index] if index < len(GPU_BUSES) else 0x03 + index
        for function, ids in ((0, R9700_PCI), (1, R9700_AUDIO)):
            devices.append({"address": f"0000:{bus:02x}:00.{function}", **ids, **R9700_SUBSYSTEM})
    return devices


def render_inventory(
    *,
    directory: Path,
    nodes: list[InventoryNode],
    key: Path,
    ssh_config: Path,
    mirror_url: str,
    key_url: str,
    key_fingerprint: str,
    gpus: int,
    registry_url: str = "",
) -> str:
    lines = [
        "# Written by `r9700ctl lab up`: nodes of a throwaway TEST lab (not for production).",
        f"# Lab directory: {directory}. Remove it all with: r9700ctl lab down --dir {directory}",
        "[r9700_nodes]",
        *(f"{node.name} ansible_host={node.address}" for node in nodes),
        "",
        "[r9700_nodes:vars]",
        "ansible_user=r9700",
        "ansible_become=true",
        f"ansible_ssh_private_key_file={key}",
        f"ansible_ssh_common_args='-F {ssh_config}'",
        "ansible_python_interpreter=/usr/bin/python3",
        "# The lab's mirror stands in for repo.radeon.com (stand-in packages, signed by the lab's key).",
        f"r9700_repo_base_url={mirror_url}",
        f"r9700_repo_key_url={key_url}",
        f"r9700_repo_key_fingerprint={key_fingerprint}",
        f"r9700_expected_gpus={gpus}",
        *(
            [
                "# The lab's registry stands in for Docker Hub (a stand-in rocm/pytorch image, no torch).",
                f"r9700_container_registry_mirror={registry_url}",
            ]
            if registry_url
            else []
        ),
        "# TEST AID set only by the lab: the PCI functions each node presents (real nodes: read from sysfs).",
        f"r9700_lab_pci_devices={json.dumps(pci_devices(gpus), separators=(',', ':'))}",
    ]
    return "\n".join(lines) + "\n"


def render_ssh_config(
    *, nodes: list[InventoryNode], key: Path, known_hosts: Path, control_dir: Path, user: str
) -> str:
    """Host keys ARE checked (StrictHostKeyChecking yes, against the lab's own known_hosts)."""
    lines = ["# Written by `r9700ctl lab up` for the lab's nodes: ssh -F <this file> node1"]
    for node in nodes:
        lines += [f"Host {node.name}", f"  HostName {node.address}"]
    lines += [
        "Host *",
        f"  User {user}",
        f"  IdentityFile {key}",
        "  IdentitiesOnly yes",
        f"  UserKnownHostsFile {known_hosts}",
        "  GlobalKnownHostsFile /dev/null",
        "  StrictHostKeyChecking yes",
        "  BatchMode yes",
        "  ConnectTimeout 5",
        "  LogLevel ERROR",
        "  # Connection reuse: testinfra's ssh:// backend opens one connection per command without it.",
        "  ControlMaster auto",
        f"  ControlPath {control_dir}/%C",
        "  ControlPersist 60",
    ]
    return "\n".join(lines) + "\n"


def render_known_hosts(entries: list[tuple[InventoryNode, str]]) -> str:
    """One line per node, valid under its name and its address: '<name>,<address> <type> <key>'."""
    return "".join(f"{node.name},{node.address} {public_key}\n" for node, public_key in entries)
