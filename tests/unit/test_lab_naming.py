"""Lab names and subnets: parallel labs on one host must never share a name or an address."""

import pytest

from r9700ctl.errors import CannotRun
from r9700ctl.lab.naming import IFNAMSIZ, MAX_NODES, LabNames, choose_lab_id, octet_of


def test_every_interface_name_fits_the_kernel_limit_even_for_the_largest_lab():
    """Bug pinned: `ip link add` fails with names over 15 characters ("not a valid ifname")."""
    names = LabNames(254)
    assert len(names.bridge) <= IFNAMSIZ
    assert len(names.veth(MAX_NODES)) <= IFNAMSIZ
    assert len(names.netns(MAX_NODES)) <= IFNAMSIZ
    assert len(names.cluster_bridge) <= IFNAMSIZ
    assert len(names.cluster_veth(MAX_NODES)) <= IFNAMSIZ


def test_addresses_come_from_the_lab_id_and_the_unused_one_is_no_node():
    names = LabNames(7)
    assert names.subnet == "10.213.7.0/24"
    assert names.host_address == "10.213.7.1"
    assert names.node_address(1) == "10.213.7.11"
    nodes = {names.node_address(i) for i in range(1, MAX_NODES + 1)}
    assert names.unused_address not in nodes | {names.host_address}


@pytest.mark.parametrize(
    ("lab_id", "name", "owned"),
    [
        (1, "r97l1br", True),
        (1, "r97l1n2", True),
        (1, "r97l1v12", True),
        (1, "r97l11br", False),  # lab 11's bridge is not lab 1's
        (1, "r97l11n2", False),
        (11, "r97l1n12", False),
        (1, "eth0", False),
        (1, "r97l1", False),
        (1, "r97l1cb", True),  # the cluster bridge (lab up --cluster-network)
        (1, "r97l1c3", True),  # node3's cluster veth
        (1, "r97l11cb", False),
    ],
)
def test_a_lab_claims_only_its_own_names(lab_id, name, owned):
    """Bug pinned: prefix matching made `down` of lab 1 delete lab 11's interfaces."""
    assert LabNames(lab_id).owns_name(name) is owned


def test_the_first_free_id_skips_used_subnets_and_stale_names():
    assert choose_lab_id(used_octets=set(), used_names=[]) == 1
    assert choose_lab_id(used_octets={1, 2}, used_names=["eth0"]) == 3
    # An aborted lab left its namespace behind: its id stays blocked until `lab down` runs.
    assert choose_lab_id(used_octets={1}, used_names=["r97l2n1"]) == 3


def test_no_free_id_is_a_clear_error():
    with pytest.raises(CannotRun, match="no free lab subnet"):
        choose_lab_id(used_octets=set(range(1, 255)), used_names=[])


@pytest.mark.parametrize(
    ("text", "octet"),
    [("10.213.5.1", 5), ("10.213.9.0/24", 9), ("10.214.5.1", None), ("fe80::1", None), ("", None)],
)
def test_only_addresses_inside_the_lab_range_block_an_id(text, octet):
    assert octet_of(text) == octet


@pytest.mark.parametrize(
    ("recorded_boot", "recorded_index", "bridge_index", "ours"),
    [
        ("boot-a", 17, 17, True),  # our bridge is still there
        ("boot-a", 17, None, True),  # bridge gone: whatever still carries the id's names is ours
        ("boot-a", 17, 42, False),  # a newer lab took the freed id
        ("boot-b", 17, 17, False),  # lab.json from before a reboot: nothing of it can exist
        ("boot-a", None, 17, False),  # ownership unknown: never delete another lab's bridge
    ],
)
def test_down_deletes_network_only_of_its_own_lab(
    monkeypatch, recorded_boot, recorded_index, bridge_index, ours
):
    from r9700ctl.lab import network, state, teardown

    monkeypatch.setattr(state, "boot_id", lambda: "boot-a")
    monkeypatch.setattr(network, "link_ifindex", lambda name: bridge_index)
    lab = state.LabState(
        directory="/tmp/r97-x", lab_id=3, boot_id=recorded_boot, bridge_ifindex=recorded_index
    )
    assert teardown.network_is_ours(lab) is ours
