"""`r9700ctl provision` against the lab's nodes over real SSH, as a user runs it (a child process).

Pinned: both nodes provisioned (exit 0) with /etc/r9700ctl/node.json written; a second run
changes nothing on any host; a host that does not answer is UNREACHABLE while the others go on,
with exit code 3; the plain progress lines ("node1: changed TASK") appear when output is not a terminal.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from r9700ctl import __version__

Run = tuple[subprocess.CompletedProcess, dict]
PROVISION_TIMEOUT_S = 1200  # a cold first run installs the stand-in packages through the lab's proxy


def provision(inventory: Path, report: Path, state: Path, *args: str) -> Run:
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "120", "XDG_STATE_HOME": str(state)}
    done = subprocess.run(
        [sys.executable, "-m", "r9700ctl", "provision", str(inventory), "--json", str(report), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=PROVISION_TIMEOUT_S,
    )
    document = json.loads(report.read_text()) if report.is_file() else {}
    return done, document


def hosts_of(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {entry["host"]: entry for entry in document.get("hosts", [])}


@pytest.fixture(scope="module")
def first_run(lab: Any, tmp_path_factory: pytest.TempPathFactory) -> Run:
    work = tmp_path_factory.mktemp("provision")
    return provision(lab.inventory, work / "first.json", work / "state")


def test_provision_of_the_lab_nodes_succeeds_and_shows_plain_progress(first_run: tuple, lab: Any) -> None:
    done, document = first_run
    assert done.returncode == 0, done.stdout + done.stderr
    names = [name for name, _ in lab.nodes]
    for name in names:
        assert f"{name}: changed Ensure the node record describes this node\n" in done.stdout
    assert "Gathering Facts" not in done.stdout and "Validating arguments" not in done.stdout
    assert "(ok=" not in done.stdout, "a task's own counts, never running totals"
    # A clean first run prints no warning the user cannot act on: Ansible's "Module remote_tmp
    # /root/.ansible/tmp did not exist and was created with a mode of 0700" showed on every node.
    assert "remote_tmp" not in done.stdout + done.stderr, done.stdout
    hosts = hosts_of(document)
    assert sorted(hosts) == sorted(names)
    assert {entry["status"] for entry in hosts.values()} <= {"OK", "CHANGED"}
    assert all(entry["failed"] == 0 and entry["unreachable"] == 0 for entry in hosts.values())
    assert document["schema"] == "r9700ctl.provision/1" and document["exit_code"] == 0
    table_rows = [
        line.split() for line in done.stdout.splitlines() if line.split()[:1] in ([n] for n in names)
    ]
    assert sorted(row[0] for row in table_rows) == sorted(names)
    # The summary names the ROCm release each host has (column ROCM, before ERROR).
    rows = [line for line in done.stdout.splitlines() if line.split()[:1] in ([n] for n in names)]
    assert all(re.search(r"\s\d+\.\d+\.\d+\s", row) for row in rows), rows


def test_each_node_has_its_record_in_etc_r9700ctl(first_run: tuple, lab: Any) -> None:
    done, _ = first_run
    assert done.returncode == 0, done.stdout + done.stderr
    for name, _address in lab.nodes:
        shown = lab.ssh(name, "cat /etc/r9700ctl/node.json")
        assert shown.returncode == 0, shown.stderr
        record = json.loads(shown.stdout)
        assert record["schema"] == "r9700ctl.node/1"
        assert record["toolkit_version"] == __version__
        assert record["hostname"] == name
        assert record["os"]["distribution"] == "Debian" and record["os"]["codename"] == "bookworm"
        assert record["kernel"] and record["architecture"] and record["memory_mb"] > 0
        assert record["cpu"]["vcpus"] > 0
        assert record["gpu_source"] == "sysfs"  # the node's machine, read as on any server
        gpus = record["gpus"]
        assert len(gpus) == lab.gpus, "one GPU count everywhere; the cards' audio functions are not GPUs"
        assert {(g["vendor"], g["device"], g["vendor_name"]) for g in gpus} == {("0x1002", "0x7551", "AMD")}
        mode = lab.ssh(name, "stat -c %a /etc/r9700ctl/node.json")
        assert mode.stdout.strip() == "644"


def test_a_second_provision_changes_nothing_on_any_host(first_run: tuple, lab: Any, tmp_path: Path) -> None:
    """The contract: provisioning provisioned hosts again reports changed=0 and reboots nothing."""
    assert first_run[0].returncode == 0, first_run[0].stdout + first_run[0].stderr
    done, document = provision(lab.inventory, tmp_path / "second.json", tmp_path / "state")
    assert done.returncode == 0, done.stdout + done.stderr
    hosts = hosts_of(document)
    assert {name: (entry["status"], entry["changed"]) for name, entry in hosts.items()} == {
        name: ("OK", 0) for name, _ in lab.nodes
    }
    assert document["reboot_pending"] == []


def test_a_host_that_does_not_answer_is_unreachable_and_the_others_still_run(
    first_run: tuple, lab: Any, tmp_path: Path
) -> None:
    """An unreachable host does not stop the others; it is listed UNREACHABLE and the run exits 3."""
    assert first_run[0].returncode == 0, first_run[0].stdout + first_run[0].stderr
    text = lab.inventory.read_text()
    ghost = f"ghost ansible_host={lab.unused_address()} ansible_ssh_timeout=5"
    last_node = lab.nodes[-1][0]
    lines = text.splitlines()
    index = next(i for i, line in enumerate(lines) if line.startswith(f"{last_node} "))
    lines.insert(index + 1, ghost)
    inventory = tmp_path / "with-ghost.ini"
    inventory.write_text("\n".join(lines) + "\n")

    done, document = provision(inventory, tmp_path / "ghost.json", tmp_path / "state")
    assert done.returncode == 3, done.stdout + done.stderr
    hosts = hosts_of(document)
    assert hosts["ghost"]["status"] == "UNREACHABLE"
    assert hosts["ghost"]["failed_tasks"][0]["unreachable"] is True
    for name, _ in lab.nodes:
        assert hosts[name]["status"] in ("OK", "CHANGED") and hosts[name]["failed"] == 0
    assert "ghost: UNREACHABLE gathering facts" in done.stdout
    assert f"run artifacts: {document['artifact_dir']}" in done.stdout
    assert document["exit_code"] == 3
