"""`r9700ctl validate INVENTORY --cluster` on lab nodes joined by a cluster network (--cluster-network).

Three labs, as few as the promises allow:
  * 3 healthy nodes: provisioned for the cluster (preflight, env, cluster roles), every phase PASSes
    with gloo really running across the nodes' network namespaces; then the link between node1 and
    node2 alone is broken (link-drop on node1, taken off again) and isolation names that link, not a
    node; then the firewall-drop fault is planted on node3 and the network phase names node3
    (rendezvous port open, the rest dropped);
  * 4 nodes, node2's link slow: isolation names node2 and no other;
  * 4 nodes with the faults the facts phase must find, on different nodes so they do not interfere:
    mtu-mismatch (node2), hostname-loopback (node3), decoy-route (node4); node1 stays clean.
RCCL cannot run here (no GPU): its steps are SKIP with CLUSTER_NO_GPU, never a PASS.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from child_process import r9700ctl

from r9700ctl.lab.naming import LabNames
from r9700ctl.lab.node import NodeOptions

pytestmark = pytest.mark.timeout(2400)


def provision_for_cluster(lab, home: str) -> None:
    """Only what cluster validation needs: preflight (the cluster NIC), env (its variables), r9700_cluster
    (iperf3, ping, ethtool); the other roles are proven by the provision tests."""
    done = r9700ctl("provision", str(lab.inventory), "--tags", "r9700_preflight,r9700_env,r9700_cluster",
                    home=home, history_in_home=True, columns=200, timeout=1500)  # fmt: skip
    assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-2000:]


def validate(lab, home: str, *extra: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    out = os.path.join(home, "cluster.json")
    done = r9700ctl("validate", str(lab.inventory), "--cluster", "--json", out, *extra,
                    home=home, history_in_home=True, columns=200, timeout=1500)  # fmt: skip
    with open(out, encoding="utf-8") as fh:
        return done, json.load(fh)


def phase(document: dict, name: str) -> dict:
    return next(p for p in document["phases"] if p["name"] == name)


def findings(document: dict, code: str) -> set[str]:
    return {r["subject"] for p in document["phases"] for r in p["results"] if r["code"] == code}


@pytest.fixture(scope="module")
def healthy(make_lab_module, tmp_path_factory):
    lab = make_lab_module(nodes=3, gpus=1, cluster=True)
    home = str(tmp_path_factory.mktemp("cluster-healthy"))
    provision_for_cluster(lab, home)
    return lab, home


def test_the_roles_give_every_node_its_cluster_nic_variables_and_the_tools(healthy):
    lab, _ = healthy
    for name, _address in lab.nodes:
        env = lab.ssh(name, "cat /etc/environment.d/90-r9700.conf").stdout
        assert (
            "NCCL_SOCKET_IFNAME==eth1" in env
            and "GLOO_SOCKET_IFNAME=eth1" in env
            and "NCCL_IB_DISABLE=1" in env
        )
        assert lab.ssh(name, "command -v iperf3 ping ethtool").returncode == 0


def test_a_healthy_three_node_cluster_passes_every_phase_with_gloo_across_the_nodes(healthy):
    lab, home = healthy
    html, junit, prom = (os.path.join(home, f"cluster.{ext}") for ext in ("html", "xml", "prom"))
    done, document = validate(lab, home, "--html", html, "--junit", junit, "--prom", prom)
    assert done.returncode == 0, done.stdout[-4000:]
    assert document["schema"] == "r9700ctl.validate-cluster/1" and document["status"] == "PASS"
    assert [p["status"] for p in document["phases"]] == ["PASS"] * 4
    network = phase(document, "network")["matrix"]["values"]
    assert all(network[a][b] > 0.04 for a in network for b in network[a])  # GB/s on 500 Mbit/s links
    gloo = [r for r in phase(document, "rendezvous")["results"] if r["id"] == "cluster.rendezvous.gloo"]
    assert len(gloo) == 3 and all(r["status"] == "PASS" and "eth1" in r["hint"] for r in gloo)
    assert findings(document, "CLUSTER_NO_GPU")  # the RCCL steps: SKIP, said why
    assert "<svg" in Path(html).read_text() and "testsuite" in Path(junit).read_text()
    assert "r9700_check_status" in Path(prom).read_text()
    assert "cluster: PASS (exit 0)" in done.stdout


def test_two_nodes_failing_only_with_each_other_get_their_link_named_not_a_node(healthy):
    """Issue 21's isolation rule, in the lab: node1<->node2 dropped (nftables on node1 against node2's
    cluster address), each passes with node3, so the link is to blame and neither node."""
    from r9700ctl.lab import netfaults

    lab, home = healthy
    names = LabNames(lab.lab_id)
    netfaults.plant(names, 1, "link-drop")
    try:
        done, document = validate(lab, home, "--no-history")
    finally:
        netfaults.remove_link_drop(names, 1)  # the firewall test below needs the network whole
    assert done.returncode == 2, done.stdout[-4000:]
    assert phase(document, "facts")["status"] == "PASS" and phase(document, "network")["status"] == "FAIL"
    failed = {r["subject"] for r in phase(document, "network")["results"] if r["status"] == "FAIL"}
    assert failed == {"node1<->node2"}  # the pair's own verdict, and the link blamed under that name
    assert findings(document, "CLUSTER_LINK_BLAMED") == {"node1<->node2"}
    assert not findings(document, "CLUSTER_NODE_BLAMED")
    assert not findings(document, "CLUSTER_ISOLATION_UNDECIDED")
    culprit = document["culprit"]
    assert (culprit["kind"], culprit["subject"], culprit["phase"]) == ("link", "node1<->node2", "network")
    assert "culprit: link node1<->node2, found by the network phase" in done.stdout


def test_a_firewall_dropping_all_but_the_rendezvous_port_is_found_by_the_network_phase_on_its_node(healthy):
    from r9700ctl.lab import netfaults

    lab, home = healthy
    netfaults.plant(LabNames(lab.lab_id), 3, "firewall-drop")
    done, document = validate(lab, home, "--no-history")
    assert done.returncode == 2, done.stdout[-4000:]
    assert phase(document, "facts")["status"] == "PASS" and phase(document, "network")["status"] == "FAIL"
    assert findings(document, "CLUSTER_PORTS_BLOCKED") == {"node1<->node3", "node2<->node3"}
    assert findings(document, "CLUSTER_NODE_BLAMED") == {"node3"}
    assert document["culprit"]["subject"] == "node3" and document["culprit"]["phase"] == "network"
    assert phase(document, "rendezvous")["status"] == "SKIP"


def test_in_four_nodes_with_one_slow_link_isolation_names_that_node_and_no_other(
    make_lab_module, tmp_path_factory
):
    lab = make_lab_module(
        nodes=4, gpus=1, cluster=True, node_options={"node2": NodeOptions(fault="slow-link")}
    )
    home = str(tmp_path_factory.mktemp("cluster-slow"))
    provision_for_cluster(lab, home)
    done, document = validate(lab, home, "--no-history")
    assert done.returncode == 2, done.stdout[-4000:]
    assert findings(document, "CLUSTER_NODE_BLAMED") == {"node2"}
    failed = {r["subject"] for r in phase(document, "network")["results"] if r["status"] == "FAIL"}
    assert failed == {"node1<->node2", "node2<->node3", "node2<->node4", "node2"}
    assert not findings(document, "CLUSTER_LINK_BLAMED")
    culprit = document["culprit"]
    assert (culprit["kind"], culprit["subject"], culprit["phase"]) == ("node", "node2", "network")
    assert "culprit: node node2, found by the network phase" in done.stdout


def test_facts_faults_are_each_found_on_their_own_node(make_lab_module, tmp_path_factory):
    faults = {"node2": "mtu-mismatch", "node3": "hostname-loopback", "node4": "decoy-route"}
    options = {node: NodeOptions(fault=name) for node, name in faults.items()}
    lab = make_lab_module(nodes=4, gpus=1, cluster=True, node_options=options)
    home = str(tmp_path_factory.mktemp("cluster-faults"))
    done, document = validate(lab, home, "--no-history")  # phase 1 needs python3 only: no provision
    assert done.returncode == 2, done.stdout[-4000:]
    assert findings(document, "CLUSTER_MTU_MISMATCH") == {"node2"}
    assert findings(document, "CLUSTER_HOSTNAME_LOOPBACK") == {"node3"}
    assert findings(document, "CLUSTER_ROUTE_NOT_CLUSTER_IF") == {"node4"}
    facts = phase(document, "facts")["results"]
    assert all(r["status"] == "PASS" for r in facts if r["subject"] == "node1")
    assert phase(document, "network")["status"] == "SKIP"
