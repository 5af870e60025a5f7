"""Upgrade, rollback and uninstall against real lab nodes: real SSH, real apt, the lab's stand-in releases.

One lab of three nodes with one stand-in GPU each (one GPU keeps ROCm 7.2.3 out of the
known issue that blocks it on two or more R9700s), for the whole module, in the order an
operator goes: provision ROCm 6.4.1; plan an upgrade with --check (nothing changes); upgrade
to 7.2.3 in batches of one, each node gated by validation at level config (the lab has no
GPU); a second upgrade changes nothing; a downgrade without --allow-downgrade is refused;
rollback in batches of one with a failing validation planted on node2 stops the rollout
(node1 rolled back, its managed packages back at the 6.4.1 state, node2 failed with the
reason, node3 untouched); uninstall removes what
provision added and a provision after it gives the same managed files, byte for byte.

The lab's nodes have no init system: the driver change needs a reboot the nodes cannot do,
which the plan and the summary say ("reboot required"), decided from the nodes' facts.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from child_process import r9700ctl as run_r9700ctl

pytestmark = pytest.mark.timeout(5400)

ROLES = Path(__file__).resolve().parents[2] / "roles"
MANAGED = yaml.safe_load((ROLES / "r9700_lifecycle" / "vars" / "main.yml").read_text())[
    "__r9700_lifecycle_managed"
]
# Records that are not configuration: the state files carry the time they were written.
# The lab's nodes have no GPU the agent can measure, but each presents one recorded R9700 machine
# (its PCI functions, KFD and DRM nodes): validation at level config judges that and passes, so the
# gate is the default rule (PASS or WARN returns a node), as on a real cluster.
GATE = ("--gate-level", "config")
# The planted fault: node2's validation cannot run once ROCm 6.4.1 is back (r9700_validate_python,
# the interpreter the validate role runs the agent with, pointed at a wrapper that refuses then).
PLANTED = """#!/bin/sh
if grep -q '^6[.]4[.]1' /opt/rocm/.info/version 2>/dev/null; then
    echo "planted fault: validation fails on this node with ROCm 6.4.1" >&2
    exit 3
fi
exec python3 "$@"
"""
# Records, not configuration: each carries when it was written (converged.json: the converged
# fast path's record of the last complete run).
RECORDS = (
    "/etc/r9700ctl/state.json",
    "/etc/r9700ctl/state.prev.json",
    "/etc/r9700ctl/before.json",
    "/etc/r9700ctl/converged.json",
)


def r9700ctl(home: Path, *args: str, timeout: int = 2400) -> subprocess.CompletedProcess[str]:
    return run_r9700ctl(*args, home=home, history_in_home=True, columns=200, timeout=timeout)


def node_json(lab: Any, node: str, path: str) -> dict[str, Any] | None:
    shown = lab.ssh(node, f"sudo cat {path}")
    return json.loads(shown.stdout) if shown.returncode == 0 else None


def managed_files(lab: Any, node: str) -> str:
    """sha256 of every managed file and of every file below r9700ctl's own directories."""
    paths = " ".join(shlex.quote(p) for p in MANAGED["files"])
    owned = " ".join(shlex.quote(p) for p in MANAGED["owned_dirs"])
    records = "|".join(RECORDS)
    script = (
        f"for f in {paths}; do [ -f $f ] && sha256sum $f; done; "
        # gpg's own home directory for the key check (its trustdb records when it was made) is not
        # configuration; neither are uninstall's copies of what was there before.
        f"find {owned} -type f 2>/dev/null | grep -vE '^({records})$' | grep -v -e /before/ -e /keys/gnupg/ "
        "| sort | xargs -r sha256sum"
    )
    out = lab.ssh(node, f"sudo sh -c {shlex.quote(script)}")
    return "".join(sorted(out.stdout.splitlines(keepends=True)))


@pytest.fixture(scope="module")
def lab3(make_lab_module: Any) -> Any:
    """Three 1-GPU nodes that start as one cold provision with ROCm 6.4.1 left them."""
    return make_lab_module(nodes=3, gpus=1, provisioned="6.4.1")


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("lifecycle")


@pytest.fixture(scope="module")
def provisioned(lab3: Any, home: Path) -> dict[str, str]:
    """ROCm 6.4.1 on every node; returns node1's managed files after this provision (which finds the
    nodes as the cold run left them: converged, nothing changed)."""
    done = r9700ctl(home, "provision", str(lab3.inventory), "-e", "r9700_rocm_version=6.4.1")
    assert done.returncode == 0, done.stdout + done.stderr
    return {"node1": managed_files(lab3, "node1")}


def test_provision_records_what_was_there_and_the_state(lab3: Any, provisioned: dict[str, str]) -> None:
    state = node_json(lab3, "node1", "/etc/r9700ctl/state.json")
    assert state and state["rocm_version"] == "6.4.1" and state["amdgpu_version"] == "6.4.1"
    assert state["installed"]["rocm-core"].startswith("6.4.1.60401-")
    assert state["repositories"]["paths"] == ["rocm/apt/6.4.1", "amdgpu/6.4.1/ubuntu"]
    # What the release brought, read from the apt lists of exactly those repositories (issue 22
    # item 4): its ROCm packages and its driver, each with its version.
    assert {"rocm-core", "rocm", "amdgpu-dkms", "amdgpu-dkms-firmware"} <= set(state["release_packages"])
    assert "python3-debian" not in state["release_packages"]
    assert set(state["release_packages"]) <= set(state["installed"])
    assert state["kernel"] == lab3.ssh("node1", "uname -r").stdout.strip() and state["time"].endswith("Z")
    before = node_json(lab3, "node1", "/etc/r9700ctl/before.json")
    assert before and before["complete"] is True
    assert "rocm-core" not in before["packages"] and "/etc/adduser.conf" in before["paths"]


def test_upgrade_check_shows_the_plan_and_changes_nothing(lab3: Any, provisioned: Any, home: Path) -> None:
    before = lab3.ssh("node1", "sudo sha256sum /etc/r9700ctl/state.json").stdout
    done = r9700ctl(home, "upgrade", str(lab3.inventory), "--rocm", "7.2.3", "--check", *GATE)
    assert done.returncode == 0, done.stdout + done.stderr
    for name in ("node1", "node2", "node3"):
        assert (
            f"{name}: upgrade ROCm 6.4.1 (amdgpu 6.4.1) -> ROCm 7.2.3 (amdgpu 30.30.3); reboot: needed, "
            "not done here: no init system" in done.stdout
        ), done.stdout
    assert "--check: nothing was changed" in done.stdout
    assert lab3.ssh("node1", "sudo sha256sum /etc/r9700ctl/state.json").stdout == before
    assert not node_json(lab3, "node1", "/etc/r9700ctl/state.prev.json")


@pytest.fixture(scope="module")
def upgraded(lab3: Any, provisioned: Any, home: Path) -> subprocess.CompletedProcess[str]:
    report = home / "upgrade.json"
    args = ("--rocm", "7.2.3", "--serial", "1", *GATE, "--json", str(report))
    done = r9700ctl(home, "upgrade", str(lab3.inventory), *args)
    done.document = json.loads(report.read_text()) if report.is_file() else {}  # type: ignore[attr-defined]
    return done


def test_upgrade_in_batches_of_one_moves_validates_and_keeps_the_old_state(lab3: Any, upgraded: Any) -> None:
    out = upgraded.stdout + upgraded.stderr
    # 1: every node moved and validated; the driver changed, and the lab cannot reboot.
    assert upgraded.returncode == 1, out
    nodes = {n["host"]: n for n in upgraded.document["nodes"]}
    assert {h: (n["status"], n["batch"]) for h, n in nodes.items()} == {
        "node1": ("upgraded", 1),
        "node2": ("upgraded", 2),
        "node3": ("upgraded", 3),
    }, out
    assert "  upgraded: node1, node2, node3" in out
    assert "reboot required: node1 (amdgpu 6.4.1 -> 30.30.3: needed, not done here: no init system" in out, (
        out
    )
    for name in ("node1", "node2", "node3"):
        state = node_json(lab3, name, "/etc/r9700ctl/state.json")
        previous = node_json(lab3, name, "/etc/r9700ctl/state.prev.json")
        assert state["rocm_version"] == "7.2.3" and state["amdgpu_version"] == "30.30.3"
        assert state["installed"]["rocm-core"].startswith("7.2.3.70203-")
        assert "graphics/7.2.3/ubuntu" in state["repositories"]["paths"]
        assert state["image"].startswith("rocm/pytorch:rocm7.2.3_")
        assert previous["rocm_version"] == "6.4.1"
        sources = lab3.ssh(name, "cat /etc/apt/sources.list.d/rocm.sources").stdout
        assert "/rocm/apt/7.2.3" in sources
        # rocdecode pulled in the graphics repository's package; rollback must take it away again.
        assert state["installed"]["mesa-amdgpu-va-drivers"].startswith("25.0.0.70203-"), state["installed"]


def test_a_second_upgrade_changes_nothing(lab3: Any, upgraded: Any, home: Path) -> None:
    assert upgraded.returncode == 1, upgraded.stdout + upgraded.stderr
    stamp = lab3.ssh("node2", "sudo sha256sum /etc/r9700ctl/state.json /etc/r9700ctl/state.prev.json").stdout
    done = r9700ctl(home, "upgrade", str(lab3.inventory), "--rocm", "7.2.3", *GATE)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "node2: nothing to do, already at ROCm 7.2.3 (amdgpu 30.30.3)" in done.stdout
    assert "  already there: node1, node2, node3" in done.stdout
    assert (
        lab3.ssh("node2", "sudo sha256sum /etc/r9700ctl/state.json /etc/r9700ctl/state.prev.json").stdout
        == stamp
    )


def test_a_downgrade_without_allow_downgrade_is_refused_in_one_line(
    lab3: Any, upgraded: Any, home: Path
) -> None:
    done = r9700ctl(home, "upgrade", str(lab3.inventory), "--rocm", "6.4.1", *GATE)
    assert done.returncode == 64, done.stdout + done.stderr
    assert done.stderr.splitlines()[-1] == (
        "error: --rocm 6.4.1 is a downgrade from 7.2.3 on node1, node2, node3; nothing was changed "
        "(add --allow-downgrade, or use r9700ctl rollback to return to the state before the last upgrade)"
    )
    assert node_json(lab3, "node1", "/etc/r9700ctl/state.json")["rocm_version"] == "7.2.3"


def test_rollback_stops_at_a_node_whose_validation_fails(lab3: Any, upgraded: Any, home: Path) -> None:
    """A failing validation planted on node2: node1 rolls back, node2 fails with why, node3 is untouched."""
    plant = lab3.ssh("node2", "sudo tee /usr/local/bin/planted-python >/dev/null", input=PLANTED)
    assert (
        plant.returncode == 0
        and lab3.ssh("node2", "sudo chmod 755 /usr/local/bin/planted-python").returncode == 0
    )
    inventory = home / "planted.ini"
    inventory.write_text(
        lab3.inventory.read_text().replace(
            "node2 ansible_host=", "node2 r9700_validate_python=/usr/local/bin/planted-python ansible_host="
        )
    )
    report = home / "rollback.json"
    args = ("--serial", "1", *GATE, "--json", str(report))
    done = r9700ctl(home, "rollback", str(inventory), *args)
    out = done.stdout + done.stderr
    assert done.returncode == 2, out
    nodes = {n["host"]: n for n in json.loads(report.read_text())["nodes"]}
    assert {h: n["status"] for h, n in nodes.items()} == {
        "node1": "upgraded",
        "node2": "failed",
        "node3": "untouched",
    }, out
    assert "rolled back: node1" in out and "untouched: node3" in out
    assert "node2: validation NO_REPORT after the move (" in out, out
    assert "planted fault: validation fails on this node with ROCm 6.4.1" in out, out
    assert "rollout 1 of 3 node(s) failed, more than --max-fail-percent 0: stopped" in out
    assert node_json(lab3, "node1", "/etc/r9700ctl/state.json")["rocm_version"] == "6.4.1"
    assert node_json(lab3, "node1", "/etc/r9700ctl/state.prev.json")["rocm_version"] == "7.2.3"
    assert node_json(lab3, "node3", "/etc/r9700ctl/state.json")["rocm_version"] == "7.2.3"
    assert lab3.ssh("node1", "dpkg-query -W -f='${Version}' rocm-core").stdout.startswith("6.4.1.60401-")
    # The managed packages are back at the 6.4.1 state: 7.2.3's graphics package, whose repository
    # went with the rollback, is gone from node1 (6.4.1's state never had it); node3 keeps it.
    mesa = "dpkg-query -W -f='${db:Status-Abbrev}' mesa-amdgpu-va-drivers"
    assert not lab3.ssh("node1", mesa).stdout.startswith("ii"), lab3.ssh("node1", mesa)
    assert "mesa-amdgpu-va-drivers" not in node_json(lab3, "node1", "/etc/r9700ctl/state.json")["installed"]
    assert lab3.ssh("node3", mesa).stdout.startswith("ii")


def test_uninstall_then_provision_gives_the_same_managed_files(
    lab3: Any, provisioned: dict[str, str], upgraded: Any, home: Path
) -> None:
    assert node_json(lab3, "node1", "/etc/r9700ctl/state.json")["rocm_version"] == "6.4.1"
    done = r9700ctl(home, "uninstall", str(lab3.inventory), "--limit", "node1")
    out = done.stdout + done.stderr
    assert done.returncode == 1, out  # the driver is removed: a reboot is pending
    assert "reboot required: node1 (amdgpu-dkms removed" in out
    left = lab3.ssh("node1", "ls /etc/r9700ctl /etc/apt/sources.list.d; dpkg-query -W rocm-core amdgpu-dkms")
    assert "rocm.sources" not in left.stdout and "No such file" in left.stderr
    assert "no packages found matching rocm-core" in left.stderr.lower()
    again = r9700ctl(
        home, "provision", str(lab3.inventory), "--limit", "node1", "-e", "r9700_rocm_version=6.4.1"
    )
    assert again.returncode == 0, again.stdout + again.stderr
    assert managed_files(lab3, "node1") == provisioned["node1"]
