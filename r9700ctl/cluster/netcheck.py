"""Preflight's cluster rules (pure): the node's address in r9700_cluster_network, its host name, its clock.

Facts in (nodefacts.py's `net`, the controller's time around the facts call), CheckResults out (the
one verdict model, each with its reason code); the preflight family r9700ctl/preflight/cluster.py
adds them to its checks and hands the cluster NIC to the environment
list (envlist.py: NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME, NCCL_IB_*). No import of preflight here.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from r9700ctl.agent.result import FAIL, PASS, WARN, CheckResult, finding

# Preflight's clock rule is the validate rule's WARN level (thresholds.yaml cluster.clock_skew_warn_s
# is the judged one); here the controller's clock is the reference and the facts call's duration
# is the sample's own uncertainty.
CLOCK_WARN_S = 1.0


@dataclass(frozen=True)
class ClusterNic:
    interface: str
    address: str


def settings(host_vars: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "network": str(host_vars.get("r9700_cluster_network") or "").strip(),
        "rdma": str(host_vars.get("r9700_cluster_rdma") or "off"),
        "hca": str(host_vars.get("r9700_cluster_rdma_hca") or "").strip(),
        "gid_index": host_vars.get("r9700_cluster_rdma_gid_index", 3),
    }


def rdma_problem(host_vars: Mapping[str, Any]) -> tuple[str, str] | None:
    """(what is wrong, the fix) where the RDMA settings cannot work, else None: RoCE needs the HCA
    NCCL_IB_HCA will name (envlist.py writes NCCL_IB_HCA==DEV:PORT from it). The one rule, given by
    preflight on every provision and by validate --cluster before it contacts a host."""
    wanted = settings(host_vars)
    if wanted["rdma"] == "roce" and not wanted["hca"]:
        return (
            "r9700_cluster_rdma is roce but r9700_cluster_rdma_hca is empty",
            "name the cluster NIC's RDMA device and port, e.g. mlx5_0:1 (`rdma link` lists them)",
        )
    return None


def judge(
    net: Mapping[str, Any], host_vars: Mapping[str, Any], clock: Mapping[str, Any] | None = None
) -> tuple[list[CheckResult], ClusterNic | None]:
    wanted = settings(host_vars)
    if not wanted["network"]:
        return [], None
    findings: list[CheckResult] = []
    try:
        network = ipaddress.ip_network(wanted["network"], strict=False)
    except ValueError:
        return [
            finding(
                "cluster.network",
                FAIL,
                f"r9700_cluster_network={wanted['network']!r} is not a network",
                "give it as a CIDR, e.g. 10.10.0.0/24",
                code="SETTINGS_INVALID",
            )
        ], None
    nic = None
    seen = []
    for link in net.get("interfaces") or []:
        for cidr in link.get("addresses") or []:
            seen.append(f"{link.get('ifname')} {cidr}")
            address = cidr.split("/")[0]
            if nic is None and ipaddress.ip_address(address) in network:
                nic = ClusterNic(str(link.get("ifname")), address)
    if nic is None:
        findings.append(
            finding(
                "cluster.address",
                FAIL,
                f"no address in r9700_cluster_network {network} "
                f"(interfaces: {', '.join(seen) or 'none read'})",
                "give the node's cluster NIC an address in that network, or correct r9700_cluster_network",
                code="CLUSTER_NO_ADDRESS",
            )
        )
    else:
        findings.append(
            finding("cluster.address", PASS, f"cluster NIC {nic.interface} {nic.address} in {network}")
        )
    problem = rdma_problem(host_vars)
    if problem is not None:
        findings.append(finding("cluster.rdma", FAIL, *problem, code="SETTINGS_INVALID"))
    findings += _hostname(net.get("hostname") or {}, nic)
    findings += _clock(net.get("epoch_s"), clock)
    return findings, nic


def _hostname(info: Mapping[str, Any], nic: ClusterNic | None) -> list[CheckResult]:
    name, addresses = info.get("name"), list(info.get("addresses") or [])
    loopback = [a for a in addresses if ipaddress.ip_address(a).is_loopback]
    if loopback:
        return [
            finding(
                "cluster.hostname",
                WARN,
                f"host name {name} resolves to {', '.join(loopback)} "
                "(gloo binds there without GLOO_SOCKET_IFNAME: vllm-project/vllm#7074, pytorch/gloo#70)",
                f"map {name} to its cluster address{' ' + nic.address if nic else ''} in /etc/hosts",
                code="CLUSTER_HOSTNAME_LOOPBACK",
            )
        ]
    return []


def _clock(node_epoch: Any, clock: Mapping[str, Any] | None) -> list[CheckResult]:
    if not isinstance(node_epoch, (int, float)) or not clock:
        return []
    before, after = float(clock.get("before") or 0), float(clock.get("after") or 0)
    if not before or not after:
        return []
    # The node read its clock between `before` and `after` on the controller's clock.
    offset = float(node_epoch) - (before + after) / 2
    if abs(offset) - (after - before) / 2 > CLOCK_WARN_S:
        return [
            finding(
                "cluster.clock",
                WARN,
                f"the node's clock is {offset:+.1f} s from the controller's (torch's c10d rendezvous drops "
                "a node whose heartbeats look 15 s old: torch/distributed/elastic/rendezvous/"
                "dynamic_rendezvous.py)",
                "run chrony on every node with the same NTP servers",
                code="CLUSTER_CLOCK_SKEW",
            )
        ]
    return []
