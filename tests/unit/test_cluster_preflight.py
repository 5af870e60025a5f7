"""Preflight with r9700_cluster_network: the node without an address there is refused by name, a
loopback host name or a clock far from the controller's WARNs, and r9700_env gets the cluster NIC."""

from __future__ import annotations

from test_preflight import check, env_of, facts, judge

NET = {
    "interfaces": [
        {"ifname": "lo", "addresses": ["127.0.0.1/8"]},
        {"ifname": "eno1", "addresses": ["192.168.1.21/24"]},
        {"ifname": "ens1f0np0", "addresses": ["10.10.0.21/24"]},
        {"ifname": "br-9e1f3c5a7b2d", "addresses": ["172.18.0.1/16"]},
    ],
    "hostname": {"name": "node1", "addresses": ["10.10.0.21"]},
    "epoch_s": 1000.0,
}
CLOCK = {"before": 999.9, "after": 1000.1}


def with_net(**over) -> dict:
    return facts(net={**NET, **over}, controller_clock=CLOCK)


def test_the_cluster_nic_gets_nccl_and_gloo_socket_ifname_and_no_ib_without_rdma():
    verdict = judge(with_net(), cluster_network="10.10.0.0/24")
    assert verdict.ok
    env = env_of(verdict)
    assert env["NCCL_SOCKET_IFNAME"] == "=ens1f0np0"
    assert env["GLOO_SOCKET_IFNAME"] == "ens1f0np0"
    assert env["NCCL_IB_DISABLE"] == "1"
    assert "NCCL_IB_HCA" not in env


def test_roce_writes_the_hca_and_gid_index_instead_of_disabling_ib():
    verdict = judge(
        with_net(),
        cluster_network="10.10.0.0/24",
        cluster_rdma="roce",
        cluster_rdma_hca="mlx5_0:1",
        cluster_rdma_gid_index=3,
    )
    env = env_of(verdict)
    assert (env["NCCL_IB_HCA"], env["NCCL_IB_GID_INDEX"]) == ("=mlx5_0:1", "3")
    assert "NCCL_IB_DISABLE" not in env


def test_a_node_with_no_address_in_the_cluster_network_is_refused_naming_what_it_has():
    verdict = judge(with_net(), cluster_network="10.99.0.0/24")
    assert not verdict.ok
    refused = check(verdict, "cluster.address")
    assert (
        refused.status == "FAIL"
        and "10.99.0.0/24" in refused.detail
        and "ens1f0np0 10.10.0.21/24" in refused.detail
    )
    assert "nothing changed" in verdict.refusal("node1")


def test_without_a_cluster_network_nothing_is_added_or_checked():
    verdict = judge(with_net())
    assert "NCCL_SOCKET_IFNAME" not in env_of(verdict)
    assert not [c for c in verdict.checks if c.id.startswith("cluster.")]


def test_a_host_name_on_loopback_and_a_clock_far_off_warn():
    net = with_net(hostname={"name": "node1", "addresses": ["127.0.1.1"]}, epoch_s=1030.0)
    verdict = judge(net, cluster_network="10.10.0.0/24")
    assert verdict.ok
    assert check(verdict, "cluster.hostname").status == "WARN"
    clock = check(verdict, "cluster.clock")
    assert clock.status == "WARN" and "+30.0 s" in clock.detail
