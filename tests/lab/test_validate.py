"""`r9700ctl validate INVENTORY` on real lab nodes through Ansible.

Lab nodes have python3 but neither torch nor a GPU, so the agent runs at `--level config`: its
static checks still report. One lab for the module (make_lab_module, 2 nodes) plus a third host
at an address nobody answers: the reachable nodes' reports must still be fetched and judged, the
unreachable one named UNREACHABLE, and the run must exit 3.
"""

from __future__ import annotations

import json
import subprocess

import pytest
from child_process import r9700ctl

from r9700ctl.agent.result import exit_code_for, worst

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def inventory(make_lab_module, tmp_path_factory):
    """The lab's two nodes plus `ghost`, an address in the lab's network that nobody answers."""
    lab = make_lab_module(nodes=2)
    path = tmp_path_factory.mktemp("validate") / "inventory.ini"
    path.write_text(
        lab.inventory.read_text().replace(
            "[r9700_nodes]\n",
            f"[r9700_nodes]\nghost ansible_host={lab.unused_address()} ansible_ssh_timeout=3\n",
        )
    )
    return path


def run_validate(inventory, *args: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    out = inventory.parent / "fleet.json"
    out.unlink(missing_ok=True)
    result = r9700ctl(
        "validate",
        str(inventory),
        "--level",
        "config",
        "--json",
        str(out),
        *args,
        home=str(inventory.parent / "state"),
        history_in_home=True,
        columns=200,
        timeout=240,
    )
    assert out.is_file(), result.stdout + result.stderr
    return result, json.loads(out.read_text())


@pytest.fixture(scope="module")
def fleet_run(inventory):
    """One validate run over node1, node2 and the unreachable ghost: (result, JSON document)."""
    return run_validate(inventory)


def test_each_reachable_nodes_report_is_fetched_with_the_agents_schema(fleet_run):
    _result, document = fleet_run

    assert document["schema"] == "r9700ctl.validate-fleet/1"
    nodes = {n["host"]: n for n in document["nodes"]}
    assert sorted(nodes) == ["ghost", "node1", "node2"]
    for name in ("node1", "node2"):
        report = nodes[name]["report"]
        assert report["schema"] == "r9700ctl.validate/1"
        assert report["level"] == "config"
        assert nodes[name]["status"] == report["status"]
        assert nodes[name]["agent_rc"] == report["exit_code"]
        assert any(r["id"] == "inventory.count" for r in report["results"])


def test_an_unreachable_host_is_named_and_the_run_exits_3(fleet_run):
    result, document = fleet_run

    ghost = next(n for n in document["nodes"] if n["host"] == "ghost")
    assert ghost["status"] == "UNREACHABLE"
    assert ghost["report"] is None and ghost["error"]
    assert result.returncode == 3 == document["exit_code"], result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    rows = [line for line in result.stdout.splitlines() if line.split()[:1] == ["ghost"]]
    assert len(rows) == 1 and "UNREACHABLE" in rows[0], result.stdout


def test_the_table_and_fleet_note_say_what_was_judged(fleet_run):
    """Two reports are too few for a fleet median: said once, not per metric."""
    result, document = fleet_run

    assert document["fleet"]["results"] == []
    assert document["fleet"]["note"].startswith("no fleet comparison: 2 node(s)")
    assert result.stdout.count("no fleet comparison") == 1
    for name in ("node1", "node2"):
        node = next(n for n in document["nodes"] if n["host"] == name)
        row = next(line for line in result.stdout.splitlines() if line.split()[:1] == [name])
        assert node["status"] in row
    assert result.stdout.splitlines()[-1].startswith(f"fleet: {document['status']} (exit 3); reports in ")


def test_without_the_unreachable_host_the_exit_code_is_the_worst_nodes(inventory):
    """The CLI's exit code is the worst node's status (0/1/2, or 3 for ERROR): the contract."""
    result, document = run_validate(inventory, "--limit", "node1,node2")

    statuses = [n["report"]["status"] for n in document["nodes"]]
    assert [n["host"] for n in document["nodes"]] == ["node1", "node2"]
    expected = exit_code_for(statuses)
    assert result.returncode == expected == document["exit_code"], result.stdout + result.stderr
    assert document["status"] == worst(statuses)
    assert f"fleet: {worst(statuses)} (exit {result.returncode})" in result.stdout


def test_a_missing_inventory_is_one_line_and_exit_64(tmp_path):
    result = r9700ctl("validate", str(tmp_path / "nodes.ini"), home=str(tmp_path), history_in_home=True,
                      columns=200, timeout=240)  # fmt: skip

    assert result.returncode == 64
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and "inventory file not found" in result.stderr


def test_each_fleet_run_is_recorded_and_compare_last_judges_every_node(inventory, fleet_run):
    """The history sees the module's runs per node; lab nodes measure no GB/s or TFLOPS at level
    config, so --compare last has nothing to hold them to: INCONCLUSIVE per node, never PASS."""
    result, document = run_validate(inventory, "--limit", "node1,node2", "--compare", "last")
    for node in document["nodes"]:
        coverage = [r for r in node["report"]["results"] if r["id"] == "baseline.coverage"]
        assert [c["status"] for c in coverage] == ["INCONCLUSIVE"], node["host"]
    assert result.stdout.count("baseline.coverage: INCONCLUSIVE") == 2, result.stdout
    assert "history: run " in result.stderr
    home = str(inventory.parent / "state")
    shown = r9700ctl("history", "--node", "node2", home=home, history_in_home=True, columns=200, timeout=240)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.count(" config ") >= 2  # the module's earlier runs and this one
