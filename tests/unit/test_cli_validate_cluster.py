"""`validate INVENTORY --cluster`: bad input is one line and exit 64 before any host is contacted."""

from __future__ import annotations

import pytest
from child_process import r9700ctl

# 192.0.2.0/24 is TEST-NET-1 (RFC 5737): nothing answers there, so a test that reached a host would hang
# or fail differently; these must stop before any connection.
NODES = "[r9700_nodes]\nnode1 ansible_host=192.0.2.11\nnode2 ansible_host=192.0.2.12\n"


@pytest.mark.parametrize(
    ("inventory", "args", "said"),
    [
        (NODES, [], "r9700_cluster_network is not set for node1, node2"),
        (NODES + "[r9700_nodes:vars]\nr9700_cluster_network=10.10.0.300/24\n", [], "is not a network"),
        (NODES.replace("192.0.2.12\n", "192.0.2.12 r9700_cluster_network=10.20.0.0/24\n")
         + "[r9700_nodes:vars]\nr9700_cluster_network=10.10.0.0/24\n", [], "differs between nodes"),
        ("[r9700_nodes]\nnode1 ansible_host=192.0.2.11 r9700_cluster_network=10.10.0.0/24\n", [],
         "needs two or more nodes"),
        (NODES + "[r9700_nodes:vars]\nr9700_cluster_network=10.10.0.0/24\n", ["--expected-gpus", "4"],
         "--expected-gpus does not apply to --cluster"),
    ],
    ids=["no-network", "bad-cidr", "two-networks", "one-node", "agent-option"],
)  # fmt: skip
def test_bad_cluster_input_is_one_line_and_exit_64(tmp_path, inventory, args, said):
    path = tmp_path / "inventory.ini"
    path.write_text(inventory)
    result = r9700ctl("validate", str(path), "--cluster", "--no-history", *args)
    assert result.returncode == 64, result.stderr
    assert result.stdout == ""
    assert result.stderr.startswith("error: ") and said in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_cluster_without_an_inventory_is_bad_input():
    result = r9700ctl("validate", "--local", "--cluster")
    assert result.returncode == 64 and "--cluster validates the nodes of an INVENTORY" in result.stderr
