"""The inventory check: Ansible's own parser made strict, and the r9700_* variables checked.

These tests use real files in tmp_path and the real Ansible parser; the bad-input cases as a
user meets them (exit 64, one line) are in test_cli_provision.py.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from r9700ctl import variables
from r9700ctl.errors import EXIT_BAD_INPUT, BadInput, CannotRun
from r9700ctl.inventory import load_inventory, parse_extra_vars


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


@pytest.fixture
def roles_dir(tmp_path: Path) -> Path:
    """A roles tree with one role, so the known variables do not depend on the roles being written."""
    role = tmp_path / "roles" / "r9700_demo"
    write(
        role / "defaults" / "main.yml",
        """
        ---
        # Demo knob.
        r9700_demo_enabled: true
        """,
    )
    write(
        role / "meta" / "argument_specs.yml",
        """
        ---
        argument_specs:
          main:
            options:
              r9700_demo_enabled:
                type: bool
                description: Demo knob.
              r9700_demo_only_in_spec:
                type: str
                description: [Declared only in the spec, ", still known."]
        """,
    )
    return tmp_path / "roles"


def test_an_ini_inventory_gives_typed_hosts_in_inventory_order(tmp_path: Path, roles_dir: Path) -> None:
    """Pins the contract other modules (doctor, collect, runner) read: name, address, port, vars."""
    inventory = write(
        tmp_path / "inventory.ini",
        """
        [r9700_nodes]
        node2 ansible_host=192.0.2.12 ansible_port=2222 r9700_expected_gpus=8
        node1 ansible_host=192.0.2.11

        [r9700_nodes:vars]
        r9700_expected_gpus=4
        r9700_demo_enabled=False
        """,
    )
    loaded = load_inventory(inventory, roles_dir=roles_dir)
    assert loaded.group == "r9700_nodes"
    assert loaded.host_names == ["node2", "node1"]
    node2, node1 = loaded.hosts
    assert (node2.address, node2.port, node2.vars["r9700_expected_gpus"]) == ("192.0.2.12", 2222, 8)
    assert (node1.address, node1.port, node1.vars["r9700_expected_gpus"]) == ("192.0.2.11", 22, 4)
    assert node1.vars["r9700_demo_enabled"] is False
    assert type(node1.vars["ansible_host"]) is str  # Ansible's tagged types are not leaked


def test_a_yaml_inventory_with_child_groups_and_vars_beside_it_is_read(
    tmp_path: Path, roles_dir: Path
) -> None:
    """Group vars at every level and group_vars/host_vars beside the inventory all count."""
    inventory = write(
        tmp_path / "cluster.yml",
        """
        all:
          vars:
            r9700_rocm_version: auto
          children:
            r9700_nodes:
              children:
                rack1:
                  hosts:
                    gpu01: {ansible_host: 192.0.2.21}
                    gpu02: {ansible_host: 192.0.2.22}
        """,
    )
    write(tmp_path / "group_vars" / "rack1.yml", "r9700_expected_gpus: 4\n")
    write(tmp_path / "host_vars" / "gpu02.yml", "r9700_expected_gpus: 8\n")
    loaded = load_inventory(inventory, roles_dir=roles_dir)
    assert loaded.host_names == ["gpu01", "gpu02"]
    assert [h.vars["r9700_expected_gpus"] for h in loaded.hosts] == [4, 8]
    assert loaded.hosts[0].vars["r9700_rocm_version"] == "auto"
    assert loaded.groups == ["r9700_nodes", "rack1"]


def test_an_extensionless_yaml_inventory_is_read_as_yaml(tmp_path: Path, roles_dir: Path) -> None:
    """Ansible's default inventory file has no extension; YAML in it must not be parsed as INI."""
    inventory = write(tmp_path / "hosts", "r9700_nodes:\n  hosts:\n    node1: {ansible_host: 192.0.2.5}\n")
    assert load_inventory(inventory, roles_dir=roles_dir).hosts[0].address == "192.0.2.5"


def test_another_group_is_picked_with_group(tmp_path: Path, roles_dir: Path) -> None:
    inventory = write(tmp_path / "inv.ini", "[gpu]\nnode1 ansible_host=192.0.2.1\n[other]\nnode9\n")
    assert load_inventory(inventory, group="gpu", roles_dir=roles_dir).host_names == ["node1"]


def test_limit_keeps_the_matching_hosts_of_the_group_only(tmp_path: Path, roles_dir: Path) -> None:
    inventory = write(
        tmp_path / "inv.ini",
        "[r9700_nodes]\nnode1 ansible_host=192.0.2.1\nnode2 ansible_host=192.0.2.2\n"
        "node3 ansible_host=192.0.2.3\n",
    )
    loaded = load_inventory(inventory, limit="node1,node3", roles_dir=roles_dir)
    assert loaded.host_names == ["node1", "node3"]
    assert load_inventory(inventory, limit="all:!node2", roles_dir=roles_dir).host_names == ["node1", "node3"]


def test_extra_vars_override_inventory_values_before_they_are_judged(tmp_path: Path, roles_dir: Path) -> None:
    """-e r9700_expected_gpus=4 fixes a bad inventory value for this run, as Ansible's precedence says."""
    inventory = write(
        tmp_path / "inv.ini", "[r9700_nodes]\nnode1 ansible_host=192.0.2.1 r9700_expected_gpus=0"
    )
    loaded = load_inventory(inventory, extra_vars={"r9700_expected_gpus": "4"}, roles_dir=roles_dir)
    assert loaded.hosts[0].vars["r9700_expected_gpus"] == "4"


def test_a_variable_declared_only_in_an_argument_spec_is_known(tmp_path: Path, roles_dir: Path) -> None:
    inventory = write(tmp_path / "inv.ini", "[r9700_nodes]\nnode1 r9700_demo_only_in_spec=x\n")
    assert load_inventory(inventory, roles_dir=roles_dir).host_names == ["node1"]


def test_known_variables_come_from_role_defaults_specs_and_the_fixed_lists(roles_dir: Path) -> None:
    known = variables.known_variables(roles_dir)
    assert known["r9700_demo_enabled"].source == "role r9700_demo"
    assert known["r9700_demo_only_in_spec"].description == "Declared only in the spec , still known."
    assert known["r9700_expected_gpus"].source == "inventory"
    assert known["r9700_group"].source == "r9700ctl"


def test_known_variables_of_the_shipped_roles_include_the_node_record_path() -> None:
    """The installed roles directory is read when none is given."""
    assert variables.known_variables()["r9700_node_record_path"].source == "role r9700_node_record"


def test_a_damaged_role_file_says_which_file_and_line(tmp_path: Path) -> None:
    role = tmp_path / "roles" / "r9700_broken"
    write(role / "defaults" / "main.yml", "---\nr9700_broken_a: 1\n  bad: [\n")
    with pytest.raises(CannotRun) as caught:
        variables.known_variables(tmp_path / "roles")
    assert caught.value.where.startswith(f"{role / 'defaults' / 'main.yml'}:")


@pytest.mark.parametrize(
    ("typo", "meant"),
    [
        ("r9700_expectd_gpus", "r9700_expected_gpus"),
        ("r9700_rocm_versoin", "r9700_rocm_version"),
        ("r9700_demo_enable", "r9700_demo_enabled"),
        ("r9700_zzz", None),
    ],
)
def test_the_closest_known_name_ignores_the_shared_prefix(
    typo: str, meant: str | None, roles_dir: Path
) -> None:
    """Every name shares r9700_: with the prefix compared, r9700_zzz 'resembled' everything."""
    assert variables.closest(typo, variables.known_variables(roles_dir)) == meant


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        pytest.param(["a=1 b=two"], {"a": "1", "b": "two"}, id="key-value pairs are strings"),
        pytest.param(['{"n": 4, "l": [1]}'], {"n": 4, "l": [1]}, id="JSON keeps types"),
        pytest.param(["a=1", "a=2"], {"a": "2"}, id="later wins"),
        pytest.param(["", "  "], {}, id="blank values are ignored"),
    ],
)
def test_extra_vars_are_merged_as_ansible_playbook_merges_them(values: list[str], expected: dict) -> None:
    assert parse_extra_vars(values) == expected


def test_extra_vars_from_a_file_are_read(tmp_path: Path) -> None:
    path = write(tmp_path / "vars.yml", "r9700_expected_gpus: 8\nother: x\n")
    assert parse_extra_vars([f"@{path}"]) == {"r9700_expected_gpus": 8, "other": "x"}


def test_bad_input_carries_exit_code_64(tmp_path: Path, roles_dir: Path) -> None:
    with pytest.raises(BadInput) as caught:
        load_inventory(tmp_path / "nope.ini", roles_dir=roles_dir)
    assert caught.value.exit_code == EXIT_BAD_INPUT


def test_an_executable_inventory_is_never_run_as_a_script(tmp_path: Path, roles_dir: Path) -> None:
    """Ansible's `script` plugin would execute an executable file; only INI and YAML are read here."""
    marker = tmp_path / "ran"
    inventory = write(tmp_path / "inv", f"#!/bin/sh\ntouch {marker}\necho '{{}}'\n")
    inventory.chmod(0o755)
    with pytest.raises(BadInput):
        load_inventory(inventory, roles_dir=roles_dir)
    assert not marker.exists()


def test_the_example_inventory_passes_its_own_checks() -> None:
    from r9700ctl.paths import content_dir

    loaded = load_inventory(content_dir("inventory") / "example.ini")
    assert loaded.host_names == ["gpu01", "gpu02", "gpu03"]
    assert [h.vars["r9700_expected_gpus"] for h in loaded.hosts] == [4, 4, 8]


def _documented_variables() -> set[str]:
    import re

    from r9700ctl.paths import content_dir

    text = (content_dir("inventory") / "group_vars" / "all.yml").read_text(encoding="utf-8")
    return set(re.findall(r"^# ?(r9700_\w+):", text, flags=re.MULTILINE))


def test_every_variable_a_user_may_set_is_documented_in_group_vars_all() -> None:
    """A role variable missing from inventory/group_vars/all.yml is one users cannot find: add a
    commented line there (`# r9700_name: default`, with a sentence on when to change it)."""
    settable = set(variables.known_variables()) - set(variables.CONTROLLER_SET)
    assert sorted(settable - _documented_variables()) == []


def test_group_vars_all_documents_no_variable_that_does_not_exist() -> None:
    """A renamed or removed variable must leave the documentation too."""
    assert sorted(_documented_variables() - set(variables.known_variables())) == []


def test_values_are_judged_by_the_roles_argument_spec_not_a_copy(tmp_path: Path, roles_dir: Path) -> None:
    """The spec file is the one place a type or a choice lives: change it and the check follows."""
    spec = roles_dir / "r9700_demo" / "meta" / "argument_specs.yml"
    spec.write_text(
        spec.read_text().replace("type: str", "type: str\n        choices: [red, blue]"),
        encoding="utf-8",
    )
    variables._role_specs.cache_clear()
    inventory = write(tmp_path / "inv.ini", "[r9700_nodes]\nnode1 r9700_demo_only_in_spec=green\n")
    with pytest.raises(BadInput) as caught:
        load_inventory(inventory, roles_dir=roles_dir)
    assert caught.value.one_line() == (
        f"{inventory}:2: node1: r9700_demo_only_in_spec='green' is not one of red, blue "
        "(set r9700_demo_only_in_spec to one of red, blue: declared only in the spec , still known)"
    )
    spec.write_text(spec.read_text().replace("[red, blue]", "[red, blue, green]"), encoding="utf-8")
    variables._role_specs.cache_clear()
    assert load_inventory(inventory, roles_dir=roles_dir).host_names == ["node1"]


def test_a_bad_boolean_names_host_value_and_what_is_allowed(tmp_path: Path, roles_dir: Path) -> None:
    inventory = write(tmp_path / "inv.ini", "[r9700_nodes]\nnode1\nnode2 r9700_demo_enabled=maybe\n")
    with pytest.raises(BadInput) as caught:
        load_inventory(inventory, roles_dir=roles_dir)
    assert caught.value.one_line() == (
        f"{inventory}:3: node2: r9700_demo_enabled='maybe' is not true or false "
        "(set r9700_demo_enabled to true or false: demo knob)"
    )


@pytest.mark.parametrize(
    "values, converted",
    [
        ({"r9700_expected_gpus": "4"}, {"r9700_expected_gpus": 4}),  # INI and -e give text
        (
            {"r9700_known_issue_workarounds_skip": "r9700-rccl-72-hang,all"},
            {"r9700_known_issue_workarounds_skip": ["r9700-rccl-72-hang", "all"]},
        ),
        ({"r9700_env": '{"A": "1"}'}, {"r9700_env": {"A": "1"}}),
        (
            {"r9700_expected_gpus": "{{ groups['x'] | length }}"},
            {"r9700_expected_gpus": "{{ groups['x'] | length }}"},
        ),
        # INI `name=` or `-e name=` of a string the roles take empty: unset, the role's default.
        ({"r9700_container_image": ""}, {"r9700_container_image": ""}),
    ],
)
def test_shipped_specs_convert_values_as_ansible_does(values: dict, converted: dict) -> None:
    assert variables.check_values(values) == (converted, [])


@pytest.mark.parametrize(
    "name, value, allowed",
    [
        ("r9700_expected_gpus", 0, "a whole number, 1 or more"),  # the one bound a spec cannot say
        ("r9700_expected_gpus", True, "a whole number, 1 or more"),  # Python's bool is an int
        ("r9700_min_free_gb", "lots", "a number, 0 or more"),
        ("r9700_driver_source", "rpm", "one of dkms, inbox, present"),
        ("r9700_apply_runtime", "sometimes", "one of auto, true, false"),
        ("r9700_known_issue_workarounds_skip", {"a": 1}, "a list of strings"),
        ("r9700_psus", "two", "a mapping of NAME: value"),
        # "" of a number or a bool: Ansible's role validation refuses it on every host ("unable to
        # convert to int"), so it is refused before any host, never passed on as "unset".
        ("r9700_expected_gpus", "", "a whole number, 1 or more"),
        ("r9700_lifecycle_skip_converged", "", "true or false"),
        ("r9700_allow_unsupported", "", "true or false"),
    ],
)
def test_shipped_specs_refuse_a_bad_value_with_what_is_allowed(
    name: str, value: object, allowed: str
) -> None:
    checked, bad = variables.check_values({name: value})
    assert name not in checked
    assert [(b.name, b.value, b.allowed) for b in bad] == [(name, value, allowed)]
