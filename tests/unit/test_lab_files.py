"""inventory.ini, ssh_config and known_hosts as the lab writes them, read back by their real readers."""

from pathlib import Path

import pytest

from r9700ctl.cli import lab as lab_cli
from r9700ctl.lab import api, keys, naming
from r9700ctl.lab.files import (
    InventoryNode,
    render_inventory,
    render_known_hosts,
    render_ssh_config,
)

NODES = [InventoryNode("node1", "10.213.4.11"), InventoryNode("node2", "10.213.4.12")]


def _inventory(tmp_path: Path, gpus: int = 4) -> Path:
    path = tmp_path / "inventory.ini"
    path.write_text(
        render_inventory(
            directory=tmp_path,
            nodes=NODES,
            key=tmp_path / "id_ed25519",
            ssh_config=tmp_path / "ssh_config",
            mirror_url="http://10.213.4.1:8080",
            key_url="http://10.213.4.1:8080/rocm/rocm.gpg.key",
            key_fingerprint="ABCDEF0123456789ABCDEF0123456789ABCDEF01",
            gpus=gpus,
        )
    )
    return path


def _ansible_vars(path: Path) -> dict:
    """Parse with Ansible's own inventory code, as the runner and the roles will."""
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.vars.manager import VariableManager

    inventory = InventoryManager(loader=DataLoader(), sources=[str(path)])
    hosts = inventory.get_groups_dict()["r9700_nodes"]
    manager = VariableManager(loader=DataLoader(), inventory=inventory)
    return {h: manager.get_vars(host=inventory.get_host(h)) for h in hosts}


def test_ansible_reads_the_lab_inventory_with_typed_variables(tmp_path):
    """Bug pinned: a JSON value Ansible cannot parse would reach the roles as a string."""
    from ansible.module_utils.parsing.convert_bool import boolean

    variables = _ansible_vars(_inventory(tmp_path, gpus=4))
    assert sorted(variables) == ["node1", "node2"]
    node1 = variables["node1"]
    assert node1["ansible_host"] == "10.213.4.11"
    assert node1["ansible_user"] == "r9700"
    assert boolean(node1["ansible_become"]) is True  # INI keeps "true" a string; Ansible converts it
    assert node1["ansible_ssh_common_args"] == f"-F {tmp_path / 'ssh_config'}"
    assert node1["r9700_expected_gpus"] == 4
    assert node1["r9700_repo_base_url"] == "http://10.213.4.1:8080"
    assert "r9700_lab_pci_devices" not in node1  # nodes present their machine in /sys instead


def test_ssh_config_checks_host_keys_against_the_lab_known_hosts(tmp_path):
    text = render_ssh_config(
        nodes=NODES,
        key=tmp_path / "id_ed25519",
        known_hosts=tmp_path / "known_hosts",
        control_dir=tmp_path / "cm",
        user="r9700",
    )
    lines = [line.strip() for line in text.splitlines()]
    assert "StrictHostKeyChecking yes" in lines
    assert f"UserKnownHostsFile {tmp_path / 'known_hosts'}" in lines
    assert "StrictHostKeyChecking no" not in text
    assert "UserKnownHostsFile /dev/null" not in text
    assert "Host node1" in lines and "HostName 10.213.4.11" in lines


def test_ssh_config_is_accepted_by_paramiko_which_the_doctor_uses(tmp_path):
    import paramiko

    config = paramiko.SSHConfig.from_text(
        render_ssh_config(
            nodes=NODES,
            key=tmp_path / "k",
            known_hosts=tmp_path / "known_hosts",
            control_dir=tmp_path / "cm",
            user="r9700",
        )
    )
    node2 = config.lookup("node2")
    assert node2["hostname"] == "10.213.4.12"
    assert node2["user"] == "r9700"
    assert node2["stricthostkeychecking"] == "yes"


def test_known_hosts_names_each_node_by_name_and_address():
    text = render_known_hosts([(NODES[0], "ssh-ed25519 AAAAC3Nza")])
    assert text == "node1,10.213.4.11 ssh-ed25519 AAAAC3Nza\n"


@pytest.mark.parametrize("directory", ["/tmp/r97-abcd", "/" + "x" * 80])
def test_control_sockets_always_fit_a_unix_socket_path(directory):
    """Bug pinned: ssh fails with 'path too long for Unix domain socket' under a deep DIR."""
    control = keys.control_dir(Path(directory), lab_id=254)
    longest = len(f"{control}/{'f' * 40}.{'r' * 16}")
    assert longest < 108


def test_cli_limits_match_the_lab_limits():
    """The CLI repeats the limits so `--help` imports no lab code; they must not drift."""
    assert lab_cli.MAX_NODES == naming.MAX_NODES
    assert lab_cli.MAX_GPUS == api.MAX_GPUS
