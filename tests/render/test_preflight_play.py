"""The r9700_preflight role for real: ansible-playbook, the action plugin, nodefacts on a host.

The "node" is this machine over a local connection; preflight only reads, so that is safe.
The lab's test aid r9700_lab_pci_devices stands in for GPUs the machine does not have, and
driver_source inbox keeps the verdict independent of whether this kernel has headers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
R9700S = json.dumps(
    [
        {"address": f"0000:0{i + 3}:00.0", "vendor": "0x1002", "device": "0x7551", "class": "0x030000"}
        for i in range(4)
    ]
)
PLAYBOOK = """\
- name: Preflight only
  hosts: nodes
  gather_facts: false
  roles:
    - role: r9700_preflight
  post_tasks:
    - name: Keep what later roles get
      ansible.builtin.copy:
        content: "{{ r9700_resolved | to_json }}"
        dest: "{{ out_dir }}/{{ inventory_hostname }}.json"
        mode: "0600"
"""


def play(tmp_path: Path, inventory: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    (tmp_path / "inventory.ini").write_text(inventory)
    env = dict(
        os.environ,
        ANSIBLE_ROLES_PATH=str(REPO / "roles"),
        ANSIBLE_HOME=str(tmp_path / "ansible-home"),
        ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_RETRY_FILES_ENABLED="0",
        ANSIBLE_PYTHON_INTERPRETER=sys.executable,
    )
    ansible_playbook = str(Path(sys.executable).parent / "ansible-playbook")
    return subprocess.run(
        [
            ansible_playbook,
            "-i",
            str(tmp_path / "inventory.ini"),
            str(tmp_path / "play.yml"),
            "-e",
            f"out_dir={tmp_path}",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
        check=False,
    )


def inventory(*hosts: str) -> str:
    common = (
        f"ansible_connection=local r9700_lab_pci_devices='{R9700S}' r9700_driver_source=inbox "
        "r9700_min_free_gb=0.1 r9700_apt_lock_timeout=0 r9700_preflight_apt_update=false"
    )
    return "[nodes]\n" + "\n".join(f"{h} {common}" for h in hosts) + "\n"


@pytest.mark.timeout(300)
def test_preflight_passes_a_good_node_and_refuses_a_bad_one_while_the_other_goes_on(tmp_path):
    """One host pinned to ROCm 6.3.2 (no gfx1201) is refused with one line; the other host is judged fine."""
    inv = inventory("good", "bad r9700_rocm_version=6.3.2")
    out = play(tmp_path, inv)
    text = out.stdout + out.stderr
    assert out.returncode == 2, text
    assert (
        "bad: preflight refused, nothing changed: "
        "ROCm 6.3.2 does not support gfx1201 (AMD Radeon AI PRO R9700)" in text
    )
    assert "releases that would work: 6.4.1" in text
    recap = {line.split()[0]: line for line in text.splitlines() if " : ok=" in line}
    assert "failed=1" in recap["bad"] and "failed=0" in recap["good"]
    assert not (tmp_path / "bad.json").exists()
    resolved = json.loads((tmp_path / "good.json").read_text())
    assert resolved["gfx_targets"] == ["gfx1201"] and resolved["discrete_gpus"] == 4
    assert resolved["rocm_version"] and resolved["suite"]


@pytest.mark.timeout(300)
def test_a_cross_family_hsa_override_is_refused_by_the_role(tmp_path):
    out = play(tmp_path, inventory("node1 r9700_hsa_override_gfx_version=9.4.2"))
    text = out.stdout + out.stderr
    assert out.returncode == 2, text
    assert (
        "node1: preflight refused, nothing changed: "
        "cross-family HSA override refused: 9.4.2 is gfx942 (CDNA3)" in text
    )


@pytest.mark.timeout(300)
def test_forcing_an_unsupported_release_passes_with_a_loud_warning(tmp_path):
    out = play(tmp_path, inventory("node1 r9700_rocm_version=6.3.2 r9700_allow_unsupported=true"))
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    assert (
        "[WARNING]: node1: rocm.version: "
        "FORCED by r9700_allow_unsupported: ROCm 6.3.2 does not support gfx1201" in (" ".join(text.split()))
    )
