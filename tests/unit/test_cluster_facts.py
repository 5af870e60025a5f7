"""Phase 1's judge: the odd node out is named where nodes must agree; loopback host names WARN."""

import json

import pytest

from r9700ctl.agentpack import data_document
from r9700ctl.cluster.facts import NodeInput, agreement, judge
from r9700ctl.cluster.limits import limits

LIMITS = limits(data_document("thresholds"))
NETWORK = "10.214.1.0/24"


def node(name: str, index: int, **change) -> NodeInput:
    address = f"10.214.1.{10 + index}"
    facts = {
        "interface": "eth1",
        "address": address,
        "interfaces": [{"ifname": "eth1", "addresses": [f"{address}/24"]}],
        "nic": {"mtu": 1500, "speed_mbps": 10000, "driver": "veth"},
        "hostname": {"name": name, "addresses": [address]},
        "clock": {"service": None, "synchronized": None, "offset_s": None},
        "versions": {"rocm": "7.1.1"},
        "memlock": {"soft_bytes": -1},
    }
    facts.update(change.pop("facts", {}))
    torch = {"torch": "2.13.0+cpu", "hip": None, "gpus": 0}
    torch.update(change.pop("torch", {}))
    routes = {"routes": {f"node{i}": {"dev": "eth1"} for i in range(1, 4) if i != index}}
    routes.update(change.pop("routes", {}))
    runtime = {"runtime": "host", "torchinfo": json.dumps(torch), **change.pop("runtime", {})}
    return NodeInput(name, facts, routes, runtime)


def three(**per_node) -> list[NodeInput]:
    return [node(f"node{i}", i, **per_node.get(f"node{i}", {})) for i in range(1, 4)]


def verdicts(nodes, check):
    return {r.subject: (r.status, r.code) for r in judge(nodes, NETWORK, LIMITS, {}).results if r.id == check}


def test_a_healthy_cluster_passes_every_fact():
    results = judge(three(), NETWORK, LIMITS, {}).results
    assert {r.status for r in results} == {"PASS"}


def test_a_node_with_no_address_in_the_cluster_network_fails_by_name():
    nodes = three(node3={"facts": {"interface": None, "address": None}})
    assert verdicts(nodes, "cluster.facts.address")["node3"] == ("FAIL", "CLUSTER_NO_ADDRESS")


def test_a_route_to_a_peer_through_another_interface_fails_the_node_that_has_it():
    """The decoy-route fault: a Docker network over the cluster's addresses takes the peers' route."""
    nodes = three(
        node3={"routes": {"routes": {"node1": {"dev": "br-9e1f3c5a7b2d"}, "node2": {"dev": "eth1"}}}}
    )
    found = verdicts(nodes, "cluster.facts.route")
    assert found["node3"] == ("FAIL", "CLUSTER_ROUTE_NOT_CLUSTER_IF")
    assert found["node1"] == found["node2"] == ("PASS", "")


def test_the_one_node_with_another_mtu_is_named_and_the_others_pass():
    nodes = three(node2={"facts": {"nic": {"mtu": 9000, "speed_mbps": 10000}}})
    found = verdicts(nodes, "cluster.facts.mtu")
    assert found == {"node1": ("PASS", ""), "node2": ("FAIL", "CLUSTER_MTU_MISMATCH"), "node3": ("PASS", "")}
    (result,) = [r for r in judge(nodes, NETWORK, LIMITS, {}).results if r.code == "CLUSTER_MTU_MISMATCH"]
    assert "MTU 9000 here, 1500 on node1, node3" in result.hint


def test_a_node_running_another_torch_is_named():
    nodes = three(node1={"torch": {"torch": "2.9.0+rocm6.4"}})
    assert verdicts(nodes, "cluster.facts.versions")["node1"] == ("FAIL", "CLUSTER_VERSION_MISMATCH")


@pytest.mark.parametrize(
    ("addresses", "code"),
    [(["127.0.1.1"], "CLUSTER_HOSTNAME_LOOPBACK"), (["10.213.1.12"], "CLUSTER_HOSTNAME_NOT_CLUSTER")],
    ids=["debian-127.0.1.1", "management-address"],
)
def test_a_host_name_resolving_elsewhere_than_the_cluster_address_warns(addresses, code):
    nodes = three(node2={"facts": {"hostname": {"name": "node2", "addresses": addresses}}})
    assert verdicts(nodes, "cluster.facts.hostname")["node2"] == ("WARN", code)


def test_an_unreachable_node_is_could_not_run_not_a_pass():
    nodes = [*three()[:2], NodeInput("node3", error="Failed to connect to the host via ssh")]
    assert verdicts(nodes, "cluster.facts.node")["node3"] == ("ERROR", "CLUSTER_UNREACHABLE")


def test_roce_needs_a_rocev2_gid_holding_the_cluster_address_at_the_configured_index():
    gids = [
        {"device": "mlx5_0", "port": "1", "index": 0, "gid": "fe80::1", "type": "IB/RoCE v1"},
        {"device": "mlx5_0", "port": "1", "index": 3, "gid": "::ffff:10.214.1.11", "type": "RoCE v2"},
    ]
    good = node("node1", 1, facts={"rdma": gids})

    def rdma_verdicts(index):
        results = judge([good], NETWORK, LIMITS, {}, {"mode": "roce", "gid_index": index}).results
        return [(r.status, r.code) for r in results if r.id == "cluster.facts.rdma"]

    assert rdma_verdicts(3) == [("PASS", "")]
    results = judge([good], NETWORK, LIMITS, {}, {"mode": "roce", "gid_index": 0}).results
    assert [(r.status, r.code) for r in results if r.id == "cluster.facts.rdma"] == [
        ("FAIL", "CLUSTER_RDMA_GID_NOT_ROCEV2")
    ]


def test_agreement_leaves_out_nodes_that_did_not_say():
    assert agreement("x", {"a": 1, "b": None}, "FAIL", "CLUSTER_MTU_MISMATCH", "MTU") == []


def test_the_node_whose_cluster_nic_has_another_name_is_named_with_the_others_name():
    """NVIDIA/nccl#1277: NCCL_SOCKET_IFNAME is one name for the job; a node whose NIC is called
    otherwise gets none of it."""
    nodes = three(
        node3={
            "facts": {"interface": "ens1f0", "interfaces": [{"ifname": "ens1f0", "addresses": []}]},
            "routes": {"routes": {"node1": {"dev": "ens1f0"}, "node2": {"dev": "ens1f0"}}},
        }
    )
    found = verdicts(nodes, "cluster.facts.interface")
    assert found == {
        "node1": ("PASS", ""),
        "node2": ("PASS", ""),
        "node3": ("FAIL", "CLUSTER_IFNAME_MISMATCH"),
    }
    (result,) = [r for r in judge(nodes, NETWORK, LIMITS, {}).results if r.code == "CLUSTER_IFNAME_MISMATCH"]
    assert "cluster NIC ens1f0 here, eth1 on node1, node2" in result.hint
    assert verdicts(nodes, "cluster.facts.route")["node3"] == ("PASS", "")  # its own NIC carries its routes


def test_nodes_whose_images_differ_only_in_their_digest_are_a_version_mismatch():
    """ROCm/legacy-rocm-build#5656: multi-node R9700 vLLM broke between image builds; torch, HIP and
    RCCL versions can read the same while the image is another build."""
    image = "rocm/pytorch@sha256:" + "a" * 64
    other = "rocm/pytorch@sha256:" + "b" * 64
    container = {"runtime": "container", "image": image}
    nodes = three(
        node1={"runtime": container},
        node2={"runtime": container},
        node3={"runtime": {**container, "image": other}},
    )
    found = verdicts(nodes, "cluster.facts.versions")
    assert found["node3"] == ("FAIL", "CLUSTER_VERSION_MISMATCH")
    assert found["node1"] == found["node2"] == ("PASS", "")
    (result,) = [r for r in judge(nodes, NETWORK, LIMITS, {}).results if r.code == "CLUSTER_VERSION_MISMATCH"]
    assert "b" * 64 in result.evidence["values"]["node3"] and "a" * 64 in result.evidence["values"]["node1"]


def test_nodes_holding_one_tag_of_two_builds_are_a_version_mismatch():
    """The same tag pulled at two times: the reference reads the same, r9700-run --image-id does not."""
    tag = "rocm/pytorch:latest"
    nodes = three(
        node1={"runtime": {"runtime": "container", "image": tag, "image_id": "sha256:" + "1" * 64}},
        node2={"runtime": {"runtime": "container", "image": tag, "image_id": "sha256:" + "1" * 64}},
        node3={"runtime": {"runtime": "container", "image": tag, "image_id": "sha256:" + "2" * 64}},
    )
    assert verdicts(nodes, "cluster.facts.versions") == {
        "node1": ("PASS", ""),
        "node2": ("PASS", ""),
        "node3": ("FAIL", "CLUSTER_VERSION_MISMATCH"),
    }


ROCE = {"mode": "roce", "gid_index": 3, "hca": "mlx5_0:1"}


def memlock_verdict(soft_bytes, runtime="host", rdma=ROCE):
    one = node("node1", 1, facts={"memlock": {"soft_bytes": soft_bytes}}, runtime={"runtime": runtime})
    found = [r for r in judge([one], NETWORK, LIMITS, {}, rdma).results if r.id == "cluster.facts.memlock"]
    return [(r.status, r.code) for r in found]


def test_with_roce_a_limited_memlock_for_a_job_on_the_host_warns():
    """RDMA registers (locks) the buffers it moves; 8 MiB, Debian's default ulimit -l, is limited."""
    assert memlock_verdict(8 << 20) == [("WARN", "CLUSTER_MEMLOCK_LIMITED")]
    assert memlock_verdict(-1) == [("PASS", "")]
    assert memlock_verdict(8 << 20, rdma={"mode": "off"}) == []  # sockets lock nothing


def test_in_the_container_runtime_the_jobs_memlock_is_unlimited_whatever_the_hosts():
    """Bug pinned: the host's 8 MiB warned though the job runs with r9700-run --host-network's
    --ulimit memlock=-1; and a memlock not read at all warned "ulimit -l is None bytes"."""
    assert memlock_verdict(8 << 20, runtime="container") == [("PASS", "")]
    assert memlock_verdict(None) == [("INCONCLUSIVE", "CLUSTER_FACTS_MISSING")]
