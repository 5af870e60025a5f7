"""`r9700ctl kernel-upgrade` on a real lab node: a new kernel whose amdgpu DKMS build fails is never booted.

The lab mirror's stand-in kernel line "lab" (r9700ctl/lab/standins.py): the node follows it
through the meta packages linux-image-lab / linux-headers-lab at version 1.0; version 2.0
brings linux-image-6.99.1-1-lab and its headers, which build nothing. The node has Debian's
real dkms with amdgpu registered, as AMD's amdgpu-dkms registers it, so installing the new
headers runs DKMS's own /etc/kernel/header_postinst.d/dkms hook, the build fails, the hook
exits 11 and dpkg fails the headers while the image is configured: apt-get exits 100, as on the
Ubuntu node of ROCm/legacy-rocm-build#3701. kernel-upgrade must refuse the kernel with apt's
and DKMS's words, leave dpkg whole (no package half-configured), the metas back at 1.0 and still
held, so the next boot (GRUB's newest kernel) is the running one.

Before that, on the same node: provision holds the line's meta packages, so apt's full upgrade
moves no kernel (ROCm/legacy-rocm-build#3883); and a kernel-upgrade with nothing to move reports
no change (issue 22 items 1, 3, 6).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from child_process import r9700ctl

from r9700ctl.lab.standins import NEXT_KERNEL

pytestmark = pytest.mark.timeout(3600)

# apt_preferences(5): a file here is read only when its name has no extension or ".pref".
LINE_PIN = "/etc/apt/preferences.d/r9700ctl-lab-line"


def last_recap(home: Path) -> str:
    """The PLAY RECAP of the newest playbook run (ansible-runner's stdout in its artifacts)."""
    runs = sorted((home / "r9700ctl" / "runs").glob("*/artifacts/*/stdout"), key=lambda p: p.stat().st_mtime)
    text = runs[-1].read_text()
    return text[text.rindex("PLAY RECAP") :]


def test_a_new_kernel_whose_dkms_hook_fails_apt_is_refused_and_undone_before_any_reboot(
    make_lab: Any, tmp_path: Path
) -> None:
    lab = make_lab(nodes=1, gpus=1, provisioned="6.4.1")
    setup = lab.ssh(
        "node1",
        "sudo apt-get update -q && sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "
        "--no-install-recommends dkms linux-image-lab=1.0 linux-headers-lab=1.0",
        timeout=1200,
    )
    assert setup.returncode == 0, setup.stdout + setup.stderr
    # The role that holds the kernel line (r9700_driver) and the preflight it reads: the node starts
    # provisioned, and the other roles are proven by test_provision.py and test_lifecycle_lab.py.
    done = r9700ctl("provision", str(lab.inventory), "--tags", "r9700_preflight,r9700_driver",
                    "-e", "r9700_rocm_version=6.4.1",
                    home=tmp_path, history_in_home=True, columns=200, timeout=1800)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    running = lab.ssh("node1", "uname -r").stdout.strip()

    # Item 3: provision held the running kernel and the line's metas; a full upgrade, which
    # installs new packages, leaves the kernel alone (without the holds it installs the new one).
    held = lab.ssh("node1", "apt-mark showhold").stdout.split()
    assert {"linux-image-lab", "linux-headers-lab", f"linux-headers-{running}"} <= set(held), held
    upgrade = lab.ssh("node1", "sudo apt-get -s dist-upgrade")
    assert upgrade.returncode == 0 and "Inst linux-" not in upgrade.stdout, upgrade.stdout

    # amdgpu registered with DKMS, as AMD's amdgpu-dkms postinst does (the stand-in runs no dkms).
    added = lab.ssh("node1", "sudo sh -c 'dkms add /usr/src/amdgpu-*'")
    assert added.returncode == 0, added.stdout + added.stderr

    # Item 6: with the line at its newest (pinned to 1.0 here), kernel-upgrade moves nothing and
    # says so: no task reports a change.
    pin = "Package: linux-image-lab linux-headers-lab\nPin: version 1.0\nPin-Priority: 1001\n"
    assert lab.ssh("node1", f"sudo tee {LINE_PIN}", input=pin).returncode == 0
    still = r9700ctl("kernel-upgrade", str(lab.inventory), "--gate-level", "config",
                     home=tmp_path, history_in_home=True, columns=200, timeout=1800)  # fmt: skip
    assert still.returncode == 0, still.stdout + still.stderr
    assert re.search(r"node1\s*: ok=\d+\s+changed=0\s+unreachable=0\s+failed=0", last_recap(tmp_path))
    assert lab.ssh("node1", f"sudo rm {LINE_PIN}").returncode == 0

    # --check: apt's simulation names the kernel the line moves to; nothing changes.
    check = r9700ctl("kernel-upgrade", str(lab.inventory), "--check", "--gate-level", "config",
                     home=tmp_path, history_in_home=True, columns=200, timeout=1800)  # fmt: skip
    said = check.stdout + check.stderr
    assert check.returncode == 0, said
    assert f"  node1: kernel {running} -> {NEXT_KERNEL} (installs " in said, said
    assert f"linux-image-{NEXT_KERNEL} " in said and "linux-image-lab 2.0" in said, said
    assert "reboot: needed, not done here: no init system" in said and "--check: nothing was changed" in said
    unchanged = lab.ssh("node1", "dpkg-query -W -f='${Version}' linux-image-lab")
    assert unchanged.stdout == "1.0", unchanged.stdout + unchanged.stderr

    # Item 1: the hook fails the install inside apt; the refusal still runs.
    done = r9700ctl("kernel-upgrade", str(lab.inventory), "--gate-level", "config",
                    home=tmp_path, history_in_home=True, columns=200, timeout=1800)  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 2, out
    assert (
        f"not rebooted: node1 still runs {running}, because installing the new kernel {NEXT_KERNEL} failed "
        f"in apt/dpkg (installed linux-headers-{NEXT_KERNEL} package post-installation script subprocess "
        "returned error exit status 1; E: Sub-process /usr/bin/dpkg returned an error code (1))"
    ) in out, out
    assert "reboot required" not in out
    # What came went again, whatever state dpkg had left it in, and the line's metas stepped
    # back: GRUB's newest kernel, the one the next boot picks, is the running one.
    assert f"removed linux-headers-{NEXT_KERNEL}, linux-image-{NEXT_KERNEL}; " in out, out
    assert "returned linux-headers-lab to 1.0, linux-image-lab to 1.0" in out, out
    assert f"the next boot is the running kernel {running}" in out, out
    assert "unconfigured" not in out, out
    installed = lab.ssh("node1", "dpkg-query -W -f='${Package} ${Version} ${Status}\\n' 'linux-*'")
    assert NEXT_KERNEL not in installed.stdout, installed.stdout
    assert "linux-image-lab 1.0 hold ok installed" in installed.stdout, installed.stdout
    assert "linux-headers-lab 1.0 hold ok installed" in installed.stdout, installed.stdout
    audit = lab.ssh("node1", "sudo dpkg --audit")
    assert audit.returncode == 0 and audit.stdout == "", audit.stdout + audit.stderr
    boots = lab.ssh("node1", "ls /boot")
    assert f"vmlinuz-{NEXT_KERNEL}" not in boots.stdout
    marker = lab.ssh("node1", "sudo cat /var/lib/r9700ctl/reboot-required")
    assert "kernel" not in marker.stdout
