"""kernel-upgrade's task file (roles/r9700_lifecycle/tasks/kernel.yml), walked with Ansible's templating.

The node's answers are real: `kernels` is the role's node script run against fake roots (dpkg
status files), and apt's output was recorded in a lab node where Debian's dkms hook failed the
stand-in kernel's headers exactly as Ubuntu's did in ROCm/legacy-rocm-build#3701
(tests/render/fixtures/apt-get-install-kernel-*.txt). What breaks if these fail: apt's non-zero
exit ends the play before the refusal, so the new kernel stays configured, dpkg stays
half-configured and the next boot takes a kernel without amdgpu; or a run that moved nothing
reports changed. The real play over SSH is tests/lab/test_kernel_upgrade_lab.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from role_render_harness import ROLES_DIR, AssertFailed, RoleRender, fixture_lines, node_script

KERNEL_TASKS = ROLES_DIR / "r9700_lifecycle" / "tasks" / "kernel.yml"
RUNNING = "6.8.0-49-generic"
NEW = "6.99.1-1-lab"
DKMS_SOURCE = "6.12.12-2164967.22.04"

BEFORE = {
    "linux-image-lab": ("hold ok installed", "1.0"),
    "linux-headers-lab": ("hold ok installed", "1.0"),
    f"linux-image-{RUNNING}": ("hold ok installed", "6.8.0-49.49"),
    f"linux-headers-{RUNNING}": ("hold ok installed", "6.8.0-49.49"),
}
# What the recorded run left (fixtures/apt-get-install-kernel-hook-fails.*): dpkg-query in that node.
AFTER_HOOK_FAILED = {
    **BEFORE,
    "linux-image-lab": ("hold ok installed", "2.0"),
    "linux-headers-lab": ("hold ok unpacked", "2.0"),
    f"linux-image-{NEW}": ("install ok installed", "6.99.1-1"),
    f"linux-headers-{NEW}": ("install ok half-configured", "6.99.1-1"),
}


def kernels(root: Path, packages: dict[str, tuple[str, str]]) -> str:
    """What `r9700-lifecycle kernels` prints for a node with these packages (Status, Version)."""
    status = root / "var/lib/dpkg/status"
    status.parent.mkdir(parents=True, exist_ok=True)
    stanzas = (f"Package: {n}\nStatus: {s}\nVersion: {v}\n" for n, (s, v) in packages.items())
    status.write_text("\n".join(stanzas))
    (root / f"usr/src/amdgpu-{DKMS_SOURCE}").mkdir(parents=True, exist_ok=True)
    return json.dumps(node_script(root, "kernels", "--running", RUNNING))


def recorded(name: str) -> str:
    return "\n".join(fixture_lines(name)) + "\n"


def kernel_tasks() -> dict[str, dict[str, Any]]:
    """The task file's tasks (blocks' included) by name, as written."""
    found: dict[str, dict[str, Any]] = {}
    for task in yaml.safe_load(KERNEL_TASKS.read_text()):
        for inner in task.get("block", [task]):
            found[inner["name"]] = inner
    return found


def install_task() -> dict[str, Any]:
    return next(t for n, t in kernel_tasks().items() if n.startswith("Kernel | Install the newest kernel"))


def walk(tmp_path: Path, before: dict, after: dict, install: dict[str, Any]) -> RoleRender:
    registered = {
        "__r9700_lifecycle_kernels_before": {"stdout": kernels(tmp_path / "before", before)},
        "__r9700_lifecycle_kernel_install": install,
        "__r9700_lifecycle_kernels_after": {"stdout": kernels(tmp_path / "after", after)},
        "__r9700_lifecycle_kernels_built": {"stdout": kernels(tmp_path / "after", after)},
        "__r9700_lifecycle_dkms_add": {"rc": 3, "stdout": "", "stderr": "Error! DKMS tree already contains"},
        "__r9700_lifecycle_dkms_build": {
            "rc": 10,
            "stdout": "",
            # The DKMS lines of the recorded run (the hook's build of the same module and kernel).
            "stderr": next(
                line
                for line in fixture_lines("apt-get-install-kernel-hook-fails.stdout.txt")
                if line.startswith("Error! Bad return status")
            ),
        },
        "__r9700_lifecycle_dkms_status": {"rc": 0, "stdout": ""},
        "__r9700_lifecycle_revert": {
            "rc": 0,
            "stdout": json.dumps({"changed": True, "said": f"the next boot is the running kernel {RUNNING}"}),
        },
    }
    context = {
        "inventory_hostname": "node1",
        "ansible_facts": {"service_mgr": "systemd"},
        "r9700_node_program": "/tmp/r9700ctl-node-x/r9700-node",  # set by r9700ctl on every run
    }
    return RoleRender("r9700_lifecycle", context, registered).run("tasks/kernel.yml")


def test_a_kernel_whose_dkms_hook_fails_apt_is_refused_and_undone_not_left_to_end_the_play(tmp_path):
    """Issue 22 item 1: Ubuntu's header_postinst.d/dkms hook makes apt-get exit 100 while the new
    kernel is already configured. The install task failed the play there, before the revert and
    the re-hold, leaving dpkg half-configured and the next boot on a kernel without amdgpu. Now
    apt's exit is judged with the DKMS verdict: refused, reverted, not rebooted, apt's own words
    first in the message."""
    assert install_task()["failed_when"] is False
    install = {
        "rc": 100,
        "stdout": recorded("apt-get-install-kernel-hook-fails.stdout.txt"),
        "stderr": recorded("apt-get-install-kernel-hook-fails.stderr.txt"),
    }
    run = walk(tmp_path, BEFORE, AFTER_HOOK_FAILED, install)
    assert run.vars["__r9700_lifecycle_new"] == NEW
    assert run.vars["__r9700_lifecycle_refused"] is True
    assert not run.task("Kernel | Remove the refused kernel's packages").skipped
    message = run.task("Kernel | Refuse to reboot").args["msg"]
    assert message.startswith(
        f"not rebooted: node1 still runs {RUNNING}, because installing the new kernel {NEW} failed in "
        f"apt/dpkg (installed linux-headers-{NEW} package post-installation script subprocess returned "
        "error exit status 1; E: Sub-process /usr/bin/dpkg returned an error code (1)) and "
        f"{NEW} has no amdgpu module (dkms status: 'nothing for this kernel'; DKMS said: Error! Bad "
        f"return status for module build on kernel: {NEW} (x86_64)). Fix the build (dkms install -m "
        f"amdgpu -v {DKMS_SOURCE} -k {NEW}), then run kernel-upgrade again. "
    ), message
    assert message.endswith(f"the next boot is the running kernel {RUNNING}")


def test_apt_failing_before_any_kernel_arrived_is_refused_with_apts_words(tmp_path):
    """A download or dependency error leaves no new kernel: still refused (dpkg may hold a part of
    the line), the message names apt's error and no DKMS build."""
    fetch = "E: Unable to fetch some archives, maybe run apt-get update"
    install = {"rc": 100, "stdout": "", "stderr": fetch}
    run = walk(tmp_path, BEFORE, BEFORE, install)
    assert run.vars["__r9700_lifecycle_refused"] is True
    message = run.task("Kernel | Refuse to reboot").args["msg"]
    assert message.startswith(
        f"not rebooted: node1 still runs {RUNNING}, because installing its kernel line failed in apt/dpkg "
        "(E: Unable to fetch some archives, maybe run apt-get update). Fix what apt reports, then run "
        "kernel-upgrade again."
    ), message


def test_a_node_dpkg_left_half_configured_is_refused_before_apt_runs_again(tmp_path):
    """apt configures pending packages as part of any install, running the hook that failed
    before again: such a node is named and nothing is changed."""
    with pytest.raises(AssertFailed, match=f"dpkg has linux-headers-{NEW}, linux-headers-lab unconfigured"):
        walk(tmp_path, AFTER_HOOK_FAILED, AFTER_HOOK_FAILED, {"rc": 0, "stdout": ""})


@pytest.mark.parametrize(
    ("fixture", "rc", "changed"),
    [
        ("apt-get-install-kernel-newest.stdout.txt", 0, False),
        ("apt-get-install-kernel-hook-fails.stdout.txt", 100, True),
    ],
    ids=["already-newest", "moved-and-failed"],
)
def test_the_install_reports_changed_only_when_apt_moved_something(tmp_path, fixture, rc, changed):
    """Issue 22 item 6: the summary match expected a leading space (' 0 upgraded, 0 newly
    installed'), but apt-get starts the line with it, so every run reported changed."""
    install = {"rc": rc, "stdout": recorded(fixture), "stderr": ""}
    after = BEFORE if not changed else AFTER_HOOK_FAILED
    run = walk(tmp_path, BEFORE, after, install)
    assert run.condition(install_task()["changed_when"], {}) is changed


def test_apt_3s_summary_with_nothing_to_do_is_not_a_change(tmp_path):
    """apt 3 prints "Summary:" and "Upgrading: 0, Installing: 0, Removing: 0, Not Upgrading: 1"
    (the format in t2linux/T2-Debian-and-Ubuntu-Kernel#135's log)."""
    stdout = (
        "linux-image-lab is already the newest version (1.0).\n"
        "Summary:\n  Upgrading: 0, Installing: 0, Removing: 0, Not Upgrading: 0\n"
    )
    run = walk(tmp_path, BEFORE, BEFORE, {"rc": 0, "stdout": stdout, "stderr": ""})
    assert run.condition(install_task()["changed_when"], {}) is False


def test_no_task_reports_a_change_whatever_it_did():
    """Issue 22 item 6: an unhold task with `changed_when: true` (and the hold after it) made
    every run a change; holds now stay and apt is told it may move the held line."""
    assert [n for n, t in kernel_tasks().items() if t.get("changed_when") is True] == []
    assert "--allow-change-held-packages" in str(install_task()["ansible.builtin.command"]["argv"])
