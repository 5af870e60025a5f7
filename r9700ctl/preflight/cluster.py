"""The cluster network (r9700_cluster_network): the node's address in it, its host name and its
clock, judged by r9700ctl/cluster/netcheck.py; the cluster NIC found goes to the environment list
(NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME, NCCL_IB_*)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from r9700ctl.agent.result import CheckResult
from r9700ctl.preflight.model import Context
from r9700ctl.preflight.registry import register


@register("cluster", order=88)
def cluster_network(ctx: Context) -> list[CheckResult]:
    """Refuse a node with no address in r9700_cluster_network; warn on a loopback host name or a
    clock far from the controller's. Nothing to judge without r9700_cluster_network."""
    from r9700ctl.cluster import netcheck

    checks, ctx.cluster_nic = netcheck.judge(
        ctx.facts.get("net") or {}, ctx.host_vars, ctx.facts.get("controller_clock")
    )
    return checks


def settings(host_vars: Mapping[str, Any]) -> dict[str, Any]:
    """The cluster variables the environment list reads."""
    from r9700ctl.cluster import netcheck

    return netcheck.settings(host_vars)
