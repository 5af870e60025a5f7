"""`r9700ctl kernel-upgrade` on a real lab node: a new kernel whose amdgpu DKMS build fails is never booted.

The lab mirror's stand-in kernel line "lab" (r9700ctl/lab/standins.py): the node follows it
through the meta packages linux-image-lab / linux-headers-lab at version 1.0; version 2.0
brings linux-image-6.99.1-1-lab and its headers, which build nothing. Debian's real dkms runs
the amdgpu build for the new kernel and fails; kernel-upgrade must install kernel and headers
together, see `dkms status` without amdgpu for the new kernel, and refuse the reboot with the
DKMS error named, leaving the node on its running kernel: the new kernel's packages removed and
the metas back at 1.0, so the next boot (GRUB's newest kernel) is still the running one.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from r9700ctl.lab.standins import NEXT_KERNEL

pytestmark = pytest.mark.timeout(3600)


def r9700ctl(home: Path, *args: str, timeout: int = 1800) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, NO_COLOR="1", COLUMNS="200", XDG_STATE_HOME=str(home))
    env["R9700CTL_HISTORY"] = str(home / "history.db")
    return subprocess.run(
        [sys.executable, "-m", "r9700ctl", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


def test_a_new_kernel_whose_dkms_build_fails_is_refused_before_any_reboot(
    make_lab: Any, tmp_path: Path
) -> None:
    lab = make_lab(nodes=1, gpus=1)
    done = r9700ctl(tmp_path, "provision", str(lab.inventory), "-e", "r9700_rocm_version=6.4.1")
    assert done.returncode == 0, done.stdout + done.stderr
    setup = lab.ssh(
        "node1",
        "sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "
        "dkms linux-image-lab=1.0 linux-headers-lab=1.0",
        timeout=1200,
    )
    assert setup.returncode == 0, setup.stdout + setup.stderr
    running = lab.ssh("node1", "uname -r").stdout.strip()

    done = r9700ctl(tmp_path, "kernel-upgrade", str(lab.inventory), "--gate-level", "config")
    out = done.stdout + done.stderr
    assert done.returncode == 2, out
    assert (
        f"not rebooted: node1 still runs {running}, because the new kernel {NEXT_KERNEL} has no amdgpu module"
        in out
    )
    assert "(dkms status: 'nothing for this kernel'; DKMS said: " in out, out
    assert "reboot required" not in out
    # Kernel and headers came together (DKMS built against those headers and failed); on the
    # refusal they went again and the line's metas stepped back, so GRUB's newest kernel, the
    # one the next boot picks, is the running one: the node stays bootable with its driver.
    assert f"removed linux-headers-{NEXT_KERNEL}, linux-image-{NEXT_KERNEL}; " in out, out
    assert "returned linux-headers-lab to 1.0, linux-image-lab to 1.0" in out, out
    assert f"the next boot is the running kernel {running}" in out, out
    installed = lab.ssh("node1", "dpkg-query -W -f='${Package} ${Version} ${Status}\\n' 'linux-*'")
    assert NEXT_KERNEL not in installed.stdout, installed.stdout
    assert "linux-image-lab 1.0 install ok installed" in installed.stdout, installed.stdout
    assert "linux-headers-lab 1.0 install ok installed" in installed.stdout, installed.stdout
    boots = lab.ssh("node1", "ls /boot")
    assert f"vmlinuz-{NEXT_KERNEL}" not in boots.stdout
    marker = lab.ssh("node1", "sudo cat /var/lib/r9700ctl/reboot-required")
    assert "kernel" not in marker.stdout
