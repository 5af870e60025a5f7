"""`r9700ctl provision` against the lab's nodes over real SSH, as a user runs it (a child process).

Pinned: a cold provision of both nodes (exit 0) with /etc/r9700ctl/node.json written, also on a
node that starts with a legacy one-line rocm.list; a second run changes nothing on any host and
says each node is converged; a node changed by hand since runs in full and is put back while the
other stays converged; a host that does not answer is UNREACHABLE while the others go on, with
exit code 3; the plain progress lines ("node1: changed TASK") appear when output is not a terminal.
The cold run is conftest's provisioned_lab, the one cold provision of the session.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from child_process import r9700ctl

from r9700ctl import __version__

Run = tuple[subprocess.CompletedProcess, dict]


def provision(inventory: Path, report: Path, state: Path, *args: str) -> Run:
    done = r9700ctl("provision", str(inventory), "--json", str(report), *args, home=state, columns=120,
                    timeout=1200)  # fmt: skip
    document = json.loads(report.read_text()) if report.is_file() else {}
    return done, document


def hosts_of(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {entry["host"]: entry for entry in document.get("hosts", [])}


@pytest.fixture(scope="module")
def first_run(provisioned_lab: Any) -> Run:
    """The cold provision of the session's provisioned lab (conftest.provisioned_lab)."""
    return provisioned_lab.first, provisioned_lab.report


@pytest.fixture(scope="module")
def lab(provisioned_lab: Any) -> Any:
    """In this file `lab` is the provisioned one."""
    return provisioned_lab.lab


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


def test_a_pre_seeded_legacy_rocm_list_is_removed_and_the_node_provisions(first_run: tuple, lab: Any) -> None:
    """R17: node2 started with a rocm.list of another Signed-By for the same repository (what an
    earlier amdgpu-install leaves); it must not break apt, and provision removes it."""
    done, document = first_run
    assert done.returncode == 0, done.stdout + done.stderr
    assert hosts_of(document)["node2"]["status"] in ("OK", "CHANGED")
    assert lab.ssh("node2", "test ! -e /etc/apt/sources.list.d/rocm.list").returncode == 0
    policy = lab.ssh("node2", "apt-cache policy rocm-core")
    assert policy.returncode == 0 and "lab-host" in policy.stdout, policy.stdout


def test_docker_io_comes_through_the_lab_proxy(first_run: tuple, lab: Any) -> None:
    """r9700_containers installs the distribution's engine with apt, through the apt proxy the node uses."""
    done, _ = first_run
    assert done.returncode == 0, done.stdout + done.stderr
    fetched = subprocess.run(
        ["grep", "-rl", "docker.io_20.10", str(Path(lab.directory) / "acng")], capture_output=True, text=True
    )
    assert fetched.stdout.strip(), "docker.io did not come through the lab's apt-cacher-ng"


def test_a_second_provision_changes_nothing_on_any_host(first_run: tuple, lab: Any, tmp_path: Path) -> None:
    """The contract: provisioning provisioned hosts again reports changed=0 and reboots nothing;
    each node is found converged (the same inputs, the node as the first run left it) and says so."""
    assert first_run[0].returncode == 0, first_run[0].stdout + first_run[0].stderr
    done, document = provision(lab.inventory, tmp_path / "second.json", tmp_path / "state")
    assert done.returncode == 0, done.stdout + done.stderr
    hosts = hosts_of(document)
    assert {
        name: (entry["status"], entry["changed"], entry["converged"]) for name, entry in hosts.items()
    } == {name: ("OK", 0, True) for name, _ in lab.nodes}
    for name, _ in lab.nodes:
        assert f"{name}: converged since " in done.stdout, done.stdout
        # Reported as the full run reported it: the release the node has, its containers.
        assert hosts[name]["versions"]["after"]["rocm-core"].startswith("7.1.1")
        assert hosts[name]["containers"]["engine"] == "docker installed, service not started: no init system"
    assert document["reboot_pending"] == []


def test_a_node_changed_by_hand_runs_in_full_and_is_put_back_while_the_other_stays_converged(
    first_run: tuple, lab: Any, tmp_path: Path
) -> None:
    """Nothing is assumed: a managed file edited and a user taken out of the render group since the
    last run are named, that node's roles run and restore both; the untouched node stays converged."""
    assert first_run[0].returncode == 0, first_run[0].stdout + first_run[0].stderr
    original = lab.ssh("node1", "cat /etc/profile.d/r9700.sh").stdout
    edit = (
        "echo 'export HSA_OVERRIDE_GFX_VERSION=9.4.2' >> /etc/profile.d/r9700.sh && gpasswd -d r9700 render"
    )
    assert lab.ssh("node1", edit, user="root").returncode == 0
    done, document = provision(lab.inventory, tmp_path / "drift.json", tmp_path / "state")
    assert done.returncode == 0, done.stdout + done.stderr
    hosts = hosts_of(document)
    assert (hosts["node1"]["converged"], hosts["node2"]["converged"]) == (False, True)
    reason = hosts["node1"]["converged_reason"]
    assert reason.startswith("not converged: since the last complete run "), reason
    assert "/etc/profile.d/r9700.sh changed" in reason and "/etc/group changed" in reason, reason
    assert hosts["node1"]["changed"] >= 2 and hosts["node2"]["changed"] == 0
    assert lab.ssh("node1", "cat /etc/profile.d/r9700.sh").stdout == original
    assert "render" in lab.ssh("node1", "id -nG r9700").stdout.split()
    # Put back as the first run left it: the next run finds it converged again.
    again, document = provision(lab.inventory, tmp_path / "again.json", tmp_path / "state")
    assert again.returncode == 0 and all(h["converged"] for h in hosts_of(document).values()), again.stdout


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
