"""`r9700ctl collect` from real lab nodes through Ansible, then `doctor --bundle` on what it wrote.

A lab of this module's own (make_lab): node1 gets the stand-in ROCm packages from the lab's mirror
(their rocminfo and amd-smi replay a real R9700 recording) and a profile.d file that exports the
magazine article's HSA_OVERRIDE_GFX_VERSION=9.4.2 next to a secret; node2 stays bare, so its
tools are absent. Nothing may fail on an absent tool, no secret may reach a bundle, and the
diagnosis of the collected bundle must name the GPUs of the machine the node presents.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pytest
from child_process import r9700ctl
from stand_in_rocm import RELEASE as ROCM
from stand_in_rocm import install_stand_in_rocm

from r9700ctl.bundle import diagnose_bundle, diagnose_path
from r9700ctl.bundle.model import lines
from r9700ctl.lab import NodeOptions, machine
from r9700ctl.lab import recordings as lab_recordings

pytestmark = pytest.mark.timeout(900)

SECRET = "s3cr3t-token-that-must-not-leave-the-node"


@pytest.fixture(scope="module")
def collected(request, tmp_path_factory):
    """One lab, collected once: (lab, out directory, collect's result)."""
    make_lab = request.getfixturevalue("make_lab_module")
    lab = make_lab(nodes=2)
    install_stand_in_rocm(lab, "node1")
    profile = f"export HSA_OVERRIDE_GFX_VERSION=9.4.2\nexport MY_API_TOKEN={SECRET}\n"
    put = lab.ssh(
        "node1", f"printf %s {shlex.quote(profile)} | sudo tee /etc/profile.d/zz-site.sh >/dev/null"
    )
    assert put.returncode == 0, put.stderr
    out = tmp_path_factory.mktemp("support")
    result = r9700ctl("collect", str(lab.inventory), "--out", str(out), "--json", str(out / "collect.json"),
                      columns=200, timeout=600)  # fmt: skip
    return lab, out, result


@pytest.fixture(scope="module")
def make_lab_module(lab_requirements):
    """make_lab for a whole module (tests/lab/conftest.py's make_lab is per test)."""
    from r9700ctl.lab import down, up

    made: list[Path] = []

    def factory(nodes: int = 1, node_options: dict[str, NodeOptions] | None = None):
        import tempfile

        directory = Path(tempfile.mkdtemp(prefix="r97-", dir="/tmp"))
        made.append(directory)
        return up(directory, nodes=nodes, node_options=node_options)

    yield factory
    for directory in made:
        assert down(directory).left == []


def test_collect_gathers_each_nodes_bundle_and_never_fails_on_an_absent_tool(collected):
    _lab, out, result = collected

    assert result.returncode == 0, result.stdout + result.stderr
    document = json.loads((out / "collect.json").read_text())
    assert document["schema"] == "r9700ctl.collect/1"
    assert [(h["host"], h["status"]) for h in document["hosts"]] == [
        ("node1", "COLLECTED"),
        ("node2", "COLLECTED"),
    ]
    node1 = set(os.listdir(out / "node1"))
    assert {"os-release", "uname.txt", "cmdline.txt", "id.txt", "env.txt", "rocminfo.txt"} <= node1
    assert {"collect.json", "MISSING.txt"} <= node1
    missing2 = (out / "node2" / "MISSING.txt").read_text().splitlines()
    assert "rocminfo.txt: rocminfo: command not found" in missing2
    assert "nvidia-smi.xml: nvidia-smi: command not found" in missing2
    assert "rocminfo.txt" not in os.listdir(out / "node2")
    assert f"next: r9700ctl doctor --bundle {out}" in result.stdout


def test_the_collected_files_are_the_tools_outputs(collected):
    _lab, out, _ = collected

    assert (out / "node1" / "id.txt").read_text().startswith("uid=")
    assert "r9700" in (out / "node1" / "id.txt").read_text()
    assert "ID=debian" in (out / "node2" / "os-release").read_text()
    rows = json.loads((out / "node1" / "collect.json").read_text())["files"]
    rocminfo = next(r for r in rows if r["file"] == "rocminfo.txt")
    assert (rocminfo["rc"], rocminfo["recorded"], rocminfo["as_root"]) == (0, True, True)
    # Issue 9 item 6: package versions and rocm-core's version file, so the release needs no amd-smi.
    assert (out / "node1" / "rocm-version.txt").read_text().startswith(f"{ROCM}-")
    packages = (out / "node1" / "packages.txt").read_text().splitlines()
    core = [line for line in packages if line.startswith(f"rocm-core\t{ROCM}.")]
    assert core and core[0].endswith("\tii "), packages


def test_env_txt_keeps_gpu_variables_and_drops_everything_else(collected):
    _, out, _ = collected

    env = (out / "node1" / "env.txt").read_text()

    assert "HSA_OVERRIDE_GFX_VERSION=9.4.2" in env.splitlines()
    assert SECRET not in env
    assert not any(SECRET in p.read_text(errors="replace") for p in (out / "node1").iterdir())


def test_doctor_on_the_collected_bundles_names_the_recorded_gpus_and_the_bad_override(collected):
    lab, out, _ = collected

    fleet = diagnose_path(out)
    node1 = next(b for b in fleet.bundles if b.node == "node1")

    # The stand-in rocminfo prints the node's own machine (r9700ctl/lab/machine.py): the recorded
    # R9700 agent once per card, at the PCI addresses the node's sysfs shows.
    recorded = diagnose_bundle((lab_recordings.recorded_root() / machine.ROCMINFO_RECORDING).parent)
    card = next(g for g in recorded.gpus if g.discrete)
    presented = machine.build(lab.gpus)
    expected = [(bdf, card.pci_id, card.gfx) for bdf in presented.gpu_addresses]
    assert [(g.bdf, g.pci_id, g.gfx) for g in node1.gpus if g.discrete] == expected
    assert (card.pci_id, card.gfx) == ("1002:7551", "gfx1201")
    override = next(f for f in node1.findings if f.id == "env.hsa_override")
    assert override.status == "FAIL"
    assert lines(override)[0].file == "env.txt"
    node2 = next(b for b in fleet.bundles if b.node == "node2")
    assert any("rocminfo.txt: rocminfo: command not found" in str(n) for n in node2.not_judged)


def test_doctor_bundle_cli_on_the_collect_directory(collected):
    _, out, _ = collected

    result = r9700ctl("doctor", "--bundle", str(out), "--json", str(out / "doctor.json"),
                      columns=200, timeout=600)  # fmt: skip

    document = json.loads((out / "doctor.json").read_text())
    assert [b["node"] for b in document["bundles"]] == ["node1", "node2"]
    assert result.returncode == document["exit_code"]
    assert "Traceback" not in result.stderr


def test_an_unreachable_host_and_a_user_without_sudo(make_lab, tmp_path):
    """collect goes on for the others; the unreachable one gets a MISSING.txt saying why (exit 3);
    without sudo the root tools are recorded as failed, the user's own ones still collected."""
    lab = make_lab(nodes=1, node_options={"node1": NodeOptions(sudo=False)})
    inventory = tmp_path / "inventory.ini"
    text = lab.inventory.read_text().replace(
        "[r9700_nodes]\n", f"[r9700_nodes]\nghost ansible_host={lab.unused_address()} ansible_ssh_timeout=3\n"
    )
    inventory.write_text(text)
    out = tmp_path / "support"

    result = r9700ctl("collect", str(inventory), "--out", str(out), "--json", str(tmp_path / "c.json"),
                      columns=200, timeout=600)  # fmt: skip

    assert result.returncode == 3, result.stdout + result.stderr
    hosts = {h["host"]: h for h in json.loads((tmp_path / "c.json").read_text())["hosts"]}
    assert hosts["ghost"]["status"] == "UNREACHABLE"
    assert (out / "ghost" / "MISSING.txt").read_text().splitlines()[1].startswith("*: host unreachable: ")
    assert hosts["node1"]["status"] == "COLLECTED"
    assert {"id.txt", "env.txt", "os-release"} <= set(hosts["node1"]["files"])
    assert "dmesg.txt" in hosts["node1"]["missing"]
    ghost = next(b for b in diagnose_path(out).bundles if b.node == "ghost")
    assert all("host unreachable" in n.evidence["reason"] for n in ghost.not_judged)
