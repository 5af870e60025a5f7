"""Text the lab writes for its users: inventory.ini, ssh_config, known_hosts (pure renderers)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class InventoryNode:
    name: str
    address: str


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
    cluster_subnet: str = "",
    cluster_line_rate_mbps: int = 0,
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
        "# Each node presents an R9700 machine with this many cards in its /sys (r9700ctl/lab/machine.py).",
        f"r9700_expected_gpus={gpus}",
        *(
            [
                "# The lab's registry stands in for Docker Hub (a stand-in rocm/pytorch image, no torch).",
                f"r9700_container_registry_mirror={registry_url}",
            ]
            if registry_url
            else []
        ),
        *(
            [
                "# The lab's cluster network (eth1 on every node, links shaped to this rate: veth reports",
                "# 10000 Mb/s to ethtool whatever it carries; r9700ctl/lab/network.py).",
                f"r9700_cluster_network={cluster_subnet}",
                f"r9700_cluster_line_rate_mbps={cluster_line_rate_mbps}",
            ]
            if cluster_subnet
            else []
        ),
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
