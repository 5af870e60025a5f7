"""The provisioning roles against real lab nodes: real SSH, real apt, the lab's signed mirror.

Each test runs `r9700ctl provision` (and `r9700ctl verify`) as a user would, in a child
process, and reads the JSON run report. The lab's nodes have no systemd, so runtime steps
(update-grub, udevadm, reboots) are skipped while every file is still written and checked.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from child_process import r9700ctl

# Files a refused node must not see changed (R9).
WATCHED = "/etc/apt /etc/modprobe.d /etc/default/grub.d"


def provision(
    inventory: Path, tmp_path: Path, *args: str, name: str = "run"
) -> tuple[subprocess.CompletedProcess[str], dict]:
    report = tmp_path / f"{name}.json"
    out = r9700ctl("provision", str(inventory), "--json", str(report), *args, home=tmp_path / "state",
                   columns=200, timeout=1500)  # fmt: skip
    document = json.loads(report.read_text()) if report.is_file() else {}
    return out, document


def hosts(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {h["host"]: h for h in document.get("hosts", [])}


def snapshot(lab: Any, node: str) -> str:
    """Checksums of every file under the watched directories (missing directories show as such)."""
    listing = (
        f"for d in {WATCHED}; do [ -d $d ] && find $d -type f -exec sha256sum {{}} + || echo no $d; done"
    )
    command = f"sudo sh -c '{listing} | sort'"
    out = lab.ssh(node, command)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_rocm_632_on_a_stand_in_r9700_is_refused_with_the_releases_that_would_work(lab, tmp_path):
    """The article's ROCm 6.3.2 has no gfx1201: preflight refuses, names 6.4.1 and later, changes nothing."""
    node = lab.nodes[0][0]
    before = snapshot(lab, node)
    out, report = provision(lab.inventory, tmp_path, "--limit", node, "-e", "r9700_rocm_version=6.3.2")
    text = out.stdout + out.stderr
    assert out.returncode == 2, text
    error = hosts(report)[node]["failed_tasks"][0]["message"]
    assert (
        "preflight refused, nothing changed: ROCm 6.3.2 does not support gfx1201 (AMD Radeon AI PRO R9700)"
        in error
    )
    assert "releases that would work: 6.4.1, 7.0.2, 7.1.1" in error
    assert snapshot(lab, node) == before


def test_forcing_an_unsupported_release_passes_preflight_with_a_loud_warning(lab, tmp_path):
    """r9700_allow_unsupported turns the refusal into a warning (preflight only: nothing installed)."""
    node = lab.nodes[0][0]
    before = snapshot(lab, node)
    extra = '{"r9700_rocm_version": "6.3.2", "r9700_allow_unsupported": true}'
    out, _report = provision(
        lab.inventory, tmp_path, "--limit", node, "--tags", "r9700_preflight", "-e", extra
    )
    text = " ".join((out.stdout + out.stderr).split())
    assert out.returncode == 0, text
    forced = "FORCED by r9700_allow_unsupported: ROCm 6.3.2 does not support gfx1201"
    assert f"{node}: WARNING rocm.version: {forced}" in text, text  # a warning gets its line in a pipe
    assert snapshot(lab, node) == before


def test_an_hsa_override_in_env_extra_is_refused_like_the_override_itself(lab, tmp_path):
    """Issue 9 item 3: the same check, the same message, whichever knob carries 9.4.2; nothing changes."""
    node = lab.nodes[0][0]
    before = snapshot(lab, node)
    messages = []
    for name, extra in (
        ("knob", '{"r9700_hsa_override_gfx_version": "9.4.2"}'),
        ("env", '{"r9700_env_extra": {"HSA_OVERRIDE_GFX_VERSION": "9.4.2"}}'),
    ):
        out, report = provision(lab.inventory, tmp_path, "--limit", node, "-e", extra, name=name)
        assert out.returncode == 2, out.stdout + out.stderr
        messages.append(hosts(report)[node]["failed_tasks"][0]["message"])
    refusal = "preflight refused, nothing changed: cross-family HSA override refused: 9.4.2 is gfx942 (CDNA3)"
    assert all(refusal in m for m in messages), messages
    details = [m.split(" (fix: ")[0] for m in messages]
    assert details[0] == details[1]
    assert snapshot(lab, node) == before


def test_a_node_without_a_headers_candidate_is_refused_and_nothing_changes(make_lab, tmp_path):
    """R9: no linux-headers-$(uname -r) candidate: refused in preflight, watched files untouched."""
    from r9700ctl.lab import NodeOptions

    lab = make_lab(nodes=1, node_options={"node1": NodeOptions(kernel_headers=False)})
    before = snapshot(lab, "node1")
    out, report = provision(lab.inventory, tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr
    error = hosts(report)["node1"]["failed_tasks"][0]["message"]
    kernel = os.uname().release
    assert f"node1: preflight refused, nothing changed: linux-headers-{kernel} has no apt candidate" in error
    assert "upgrade the kernel and reboot" in error
    assert snapshot(lab, "node1") == before


def test_an_apt_lock_held_with_flock_makes_preflight_wait_then_name_the_holder(lab, tmp_path):
    """R11: preflight waits r9700_apt_lock_timeout seconds, then names the PID and command holding it."""
    node = lab.nodes[1][0]
    hold = "sudo sh -c 'flock /var/lib/dpkg/lock-frontend sleep 600 > /dev/null 2>&1 < /dev/null & echo $!'"
    started = lab.ssh(node, hold)
    assert started.returncode == 0, started.stderr
    pid = int(started.stdout.strip())
    try:
        deadline = time.monotonic() + 30  # until the holder has the lock, not a fixed pause
        while lab.ssh(node, "sudo flock -n /var/lib/dpkg/lock-frontend true").returncode == 0:
            assert time.monotonic() < deadline, "the lock holder never took the lock"
        before = snapshot(lab, node)
        start = time.monotonic()
        out, report = provision(lab.inventory, tmp_path, "--limit", node, "-e", "r9700_apt_lock_timeout=8")
        waited = time.monotonic() - start
        assert out.returncode == 2, out.stdout + out.stderr
        error = hosts(report)[node]["failed_tasks"][0]["message"]
        assert (
            f"dpkg/apt lock still held after waiting 8 s: pid {pid} "
            "(flock /var/lib/dpkg/lock-frontend sleep 600) holds /var/lib/dpkg/lock-frontend"
        ) in error
        assert waited >= 8
        assert snapshot(lab, node) == before
    finally:
        # flock's child (sleep) inherits the locked descriptor: killing flock alone left the session
        # lab's dpkg lock held for ten minutes, and a later file's doctor run on that node found it.
        lab.ssh(node, f"sudo pkill -P {pid}; sudo kill {pid}")
        deadline = time.monotonic() + 30
        while lab.ssh(node, "sudo flock -n /var/lib/dpkg/lock-frontend true").returncode != 0:
            assert time.monotonic() < deadline, "the dpkg lock is still held after the test"
            time.sleep(0.5)


def test_check_mode_on_a_fresh_node_finishes_without_failing(lab, tmp_path):
    """R2: --check on a node with no AMD repository yet reports what would change and fails nothing."""
    node = lab.nodes[0][0]
    before = snapshot(lab, node)
    out, report = provision(lab.inventory, tmp_path, "--check", "--limit", node)
    assert out.returncode == 0, out.stdout + out.stderr
    assert hosts(report)[node]["failed"] == 0
    assert hosts(report)[node]["changed"] > 0, "a fresh node: the dry run must see what it would change"
    assert snapshot(lab, node) == before
