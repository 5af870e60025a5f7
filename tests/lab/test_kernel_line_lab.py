"""Preflight on a real lab node judges the kernel the node runs against the lines AMD lists
(issue 22 item 2): a line the release does not list is a warning, a line the release's
amdgpu-dkms is known not to build on is a refusal, and neither changes anything on the node.

A lab node shares the host's kernel, so uname(2) answers with the host's release. The node is
made to present the kernel of ROCm/amdgpu#192 instead, the way a server running it would: a
preloaded uname() (/etc/ld.so.preload, read by the dynamic loader of every process the node
starts, ld.so(8)) answers 6.14.0-24-generic, Ubuntu 24.04's 6.14 HWE kernel on which ROCm
6.4.1's amdgpu-dkms fails to build, and its headers package is installed (an empty stand-in, as
the lab's headers for the host kernel are). Nothing of r9700ctl is told: `r9700ctl provision
--tags r9700_preflight` and `r9700ctl doctor` run as a user runs them, the node program reads
the kernel with platform.uname() as on any node, and the controller judges it with the
manifest's kernel lines (r9700ctl/kernel_lines.py).

Debian 12, the lab's system, is listed with kernel 6.1 for every release (the manifest's
`kernels`, from AMD's compatibility matrix), so 6.14 is a line ROCm 7.1.1 does not list there
(a warning; 7.1.1 lists 6.14 only as Ubuntu 24.04's HWE) and the line ROCm 6.4.1's amdgpu-dkms
does not build on (the manifest's `dkms_build_fails`: a refusal). `auto`'s preference for a
release that lists the node's kernel cannot be shown on Debian 12: every release lists the same
line there, so the kernel never decides between them (tests/unit/test_preflight.py shows it on
Ubuntu's facts).
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from child_process import r9700ctl as run_r9700ctl

from r9700ctl.lab import debs

pytestmark = pytest.mark.timeout(1800)

# The kernel of ROCm/amdgpu#192 ("Bad return status for module build" of amdgpu-dkms
# 1:6.12.12.60401-2164967.24.04 on 6.14.0-24-generic), the report the manifest cites for 6.4.1.
KERNEL = "6.14.0-24-generic"
SHIM = "/usr/local/lib/r9700ctl-lab-uname.so"
# A preloaded uname(): the kernel's own answer with the release replaced (glibc's uname is a
# thin wrapper of the syscall; Python's os.uname and coreutils' uname call it).
SHIM_SOURCE = r"""
#include <string.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

int uname(struct utsname *buf) {
    long done = syscall(SYS_uname, buf);
    if (done == 0) {
        strncpy(buf->release, RELEASE, sizeof buf->release - 1);
        buf->release[sizeof buf->release - 1] = '\0';
    }
    return (int)done;
}
"""
# What preflight must leave as it was: configuration, packages and their holds, r9700ctl's records.
SNAPSHOT = (
    "find /etc /opt /usr/src -xdev -type f -exec sha256sum {} + | sort; "
    "dpkg-query -W -f='${Package} ${Version} ${Status}\\n'; apt-mark showhold; "
    "test -e /etc/r9700ctl && echo /etc/r9700ctl exists || echo no /etc/r9700ctl"
)


def r9700ctl(home: Path, *args: str, timeout: int = 900) -> subprocess.CompletedProcess[str]:
    """HOME, the state and the history are `home`; no ssh-agent is offered (no SSH_AUTH_SOCK)."""
    return run_r9700ctl(*args, env={"HOME": str(home)}, without=("SSH_AUTH_SOCK",), home=home,
                        history_in_home=True, columns=200, timeout=timeout)  # fmt: skip


def as_root(lab: Any, command: str, data: bytes | None = None) -> str:
    stdin = base64.b64encode(data).decode() if data is not None else None
    done = lab.ssh("node1", command, user="root", input=stdin, timeout=300)
    assert done.returncode == 0, f"{command}: {done.stdout}{done.stderr}"
    return done.stdout


def present_kernel(lab: Any, release: str, scratch: Path) -> None:
    """Make node1 present `release` as its running kernel: uname answers it, its headers are installed."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("needs a C compiler on the lab host (apt-get install gcc) for the node's uname stand-in")
    source, shim = scratch / "uname.c", scratch / "uname.so"
    source.write_text(SHIM_SOURCE)
    flags = ["-shared", "-fPIC", "-O2", "-fno-stack-protector", "-U_FORTIFY_SOURCE", f'-DRELEASE="{release}"']
    subprocess.run(
        [compiler, *flags, "-o", str(shim), str(source)], check=True, capture_output=True, timeout=120
    )
    headers = f"linux-headers-{release}"
    package = debs.DebPackage(
        name=headers,
        version=f"{release.split('-')[0]}-0lab",
        summary=f"headers for Linux {release} - r9700ctl lab stand-in",
        description="Lab stand-in: empty; the node presents this kernel through a preloaded uname().",
        section="kernel",
        files=[debs.DebFile(f"/usr/src/{headers}/Makefile", b"# r9700ctl lab stand-in: builds nothing.\n")],
        symlinks=[debs.DebSymlink(f"/lib/modules/{release}/build", f"/usr/src/{headers}")],
    )
    as_root(
        lab, f"base64 -d > /root/{package.filename} && dpkg -i /root/{package.filename}", debs.build(package)
    )
    as_root(lab, f"rm /root/{package.filename}")
    as_root(lab, f"base64 -d > {SHIM}", shim.read_bytes())
    as_root(lab, f"echo {SHIM} > /etc/ld.so.preload")
    said = as_root(lab, "uname -r; python3 -c 'import platform; print(platform.release())'")
    assert said.split() == [release, release], said


def preflight(lab: Any, home: Path, release: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    report = home / f"preflight-{release}.json"
    done = r9700ctl(
        home,
        "provision",
        str(lab.inventory),
        "--tags",
        "r9700_preflight",
        "-e",
        f"r9700_rocm_version={release}",
        "--json",
        str(report),
    )
    document = json.loads(report.read_text()) if report.is_file() else {}
    return done, {h["host"]: h for h in document.get("hosts", [])}


def test_preflight_warns_on_an_unlisted_kernel_line_and_refuses_where_amdgpu_dkms_does_not_build(
    make_lab: Any, tmp_path: Path
) -> None:
    lab = make_lab(nodes=1, gpus=1)
    present_kernel(lab, KERNEL, tmp_path)
    before = as_root(lab, SNAPSHOT)

    # ROCm 7.1.1 lists 6.14 only for Ubuntu 24.04 (HWE); on Debian 12 it lists 6.1: a warning,
    # and preflight passes.
    warned, hosts = preflight(lab, tmp_path, "7.1.1")
    said = warned.stdout + warned.stderr
    assert warned.returncode == 0, said
    assert hosts["node1"]["failed"] == 0, hosts
    unlisted = (
        f"node1: WARNING kernel.line: kernel {KERNEL} (line 6.14) is not a kernel line AMD lists for "
        "ROCm 7.1.1 on debian-12 (6.1 stable) (fix: boot a 6.1 (stable) kernel)"
    )
    assert unlisted in said.splitlines(), said

    # ROCm 6.4.1's amdgpu-dkms does not build on 6.14 (ROCm/amdgpu#192): refused before anything.
    refused, hosts = preflight(lab, tmp_path, "6.4.1")
    said = refused.stdout + refused.stderr
    assert refused.returncode == 2, said
    message = hosts["node1"]["failed_tasks"][0]["message"]
    assert message.startswith("node1: preflight refused, nothing changed: "), message
    assert (
        f"ROCm 6.4.1's amdgpu-dkms does not build on kernel {KERNEL} (line 6.14): "
        "https://github.com/ROCm/amdgpu/issues/192"
    ) in message, message
    assert "more preflight failure" not in message, message  # its headers are there: the line alone refuses

    # doctor (read-only) reads the same kernel through the same node program and judges it the same way.
    doctored = r9700ctl(tmp_path, "doctor", str(lab.inventory), "--json", str(tmp_path / "doctor.json"))
    report = json.loads((tmp_path / "doctor.json").read_text())
    host = next(h for h in report["hosts"] if h["host"] == "node1")
    line = next(c for c in host["checks"] if c["id"] == "preflight.kernel.line")
    assert (line["status"], line["code"]) == ("WARN", "KERNEL_LINE_UNLISTED"), (line, doctored.stdout)
    assert f"kernel {KERNEL} (line 6.14)" in line["detail"], line

    assert as_root(lab, SNAPSHOT) == before, "preflight or doctor changed the node"
