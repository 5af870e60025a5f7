"""Phase 1 on a node: its readers against canned `ip` output and a fake sysfs tree."""

import json

from r9700ctl.agent.cluster import netfacts


# In the shape `ip -j -4 addr show` prints (only the keys read), with the interfaces of a lab node of
# `lab up --cluster-network` (management eth0, cluster eth1, the decoy Docker-style bridge).
def link(name: str, state: str, mtu: int, address: str, prefix: int) -> dict:
    return {
        "ifname": name,
        "operstate": state,
        "mtu": mtu,
        "addr_info": [{"local": address, "prefixlen": prefix}],
    }


IP_ADDR = json.dumps(
    [
        link("lo", "UNKNOWN", 65536, "127.0.0.1", 8),
        link("eth0", "UP", 1500, "10.213.3.11", 24),
        link("eth1", "UP", 1500, "10.214.3.11", 24),
        link("br-9e1f3c5a7b2d", "UP", 1500, "172.18.0.1", 16),
    ]
)
ROUTE_DECOY = json.dumps([{"dst": "10.214.3.12", "dev": "br-9e1f3c5a7b2d", "prefsrc": "172.18.0.1"}])


def canned(outputs):
    def run(argv):
        return outputs.get(tuple(argv))

    return run


def test_the_cluster_interface_is_the_one_holding_an_address_in_the_network():
    links = netfacts.interfaces(canned({("ip", "-j", "-4", "addr", "show"): (0, IP_ADDR)}))
    assert netfacts.cluster_interface(links, "10.214.3.0/24") == ("eth1", "10.214.3.11")
    assert netfacts.cluster_interface(links, "192.168.9.0/24") == (None, None)


def test_routes_name_the_interface_the_kernel_would_use_for_each_peer():
    run = canned({("ip", "-j", "route", "get", "10.214.3.12"): (0, ROUTE_DECOY)})
    routes = netfacts.routes(
        {"node": "node1", "peers": {"node1": "10.214.3.11", "node2": "10.214.3.12"}}, run
    )
    assert routes == {"node2": {"dev": "br-9e1f3c5a7b2d", "src": "172.18.0.1", "via": None}}


def test_nic_facts_come_from_sysfs_and_an_unknown_speed_is_none(tmp_path):
    net = tmp_path / "sys/class/net/eth1"
    net.mkdir(parents=True)
    (net / "mtu").write_text("9000\n")
    (net / "speed").write_text("-1\n")  # what virtio and some bonds report
    (net / "operstate").write_text("up\n")
    nic = netfacts.nic(str(tmp_path), "eth1", canned({}))
    assert (nic["mtu"], nic["speed_mbps"], nic["operstate"]) == (9000, None, "up")


def test_roce_gids_bound_to_the_cluster_nic_are_read_with_their_type(tmp_path):
    port = tmp_path / "sys/class/infiniband/mlx5_0/ports/1"
    entries = [
        (0, "fe80:0000:0000:0000:0000:0000:0000:0001", "IB/RoCE v1", "eth1"),
        (3, "0000:0000:0000:0000:0000:ffff:0ad6:030b", "RoCE v2", "eth1"),  # ::ffff:10.214.3.11
        (4, "0000:0000:0000:0000:0000:ffff:0a00:0001", "RoCE v2", "eth9"),  # another NIC's
    ]
    for index, gid, kind, ndev in entries:
        for sub, text in (("gids", gid), ("gid_attrs/types", kind), ("gid_attrs/ndevs", ndev)):
            (port / sub).mkdir(parents=True, exist_ok=True)
            (port / sub / str(index)).write_text(text + "\n")
    gids = netfacts.rdma_gids(str(tmp_path), "eth1")
    assert [(g["index"], g["type"]) for g in gids] == [(0, "IB/RoCE v1"), (3, "RoCE v2")]


def test_chrony_tracking_gives_the_offset_and_sync_state():
    # A line in chronyc -c tracking's CSV layout (chronyc(1) "tracking": reference ID, its name, stratum,
    # ref time, System time, ..., leap status last); the figures are made up for the test.
    fields = ["C0A80001", "192.168.0.1", "3", "1733212345.123", "-0.000012", "0.000003", "0.000010", "-1.234"]
    line = ",".join([*fields, "0.001", "0.02", "0.01", "0.0005", "64.0", "Normal"]) + "\n"
    clock = netfacts.clock(canned({("chronyc", "-c", "tracking"): (0, line)}))
    assert (clock["service"], clock["offset_s"], clock["synchronized"]) == ("chrony", -0.000012, True)
