"""The kernel command line drop-in, the node's records, and what a booted node runs with."""

from __future__ import annotations

import re

import pytest

DROPIN = "/etc/default/grub.d/99-r9700.cfg"


def test_grub_drop_in_carries_exactly_the_configured_parameters(host, node):
    """R29: the drop-in follows r9700_kernel_params; a parameter taken out is gone, none means no file."""
    params = [str(p) for p in node.var("r9700_kernel_params")]
    dropin = host.file(DROPIN)
    if not params:
        assert not dropin.exists
        return
    match = re.search(r'^GRUB_CMDLINE_LINUX="\$\{GRUB_CMDLINE_LINUX\} (.*)"$', dropin.content_string, re.M)
    assert match and match.group(1).split() == params


@pytest.mark.runtime
def test_the_running_kernel_was_booted_with_the_parameters(host, node):
    if not node.runtime:
        pytest.skip("runtime steps are off on this node (no systemd: image build or lab)")
    if host.file("/var/lib/r9700ctl/reboot-required").exists:
        pytest.skip("a reboot is pending: the parameters apply after it")
    cmdline = host.file("/proc/cmdline").content_string.split()
    assert [p for p in node.var("r9700_kernel_params") if p not in cmdline] == []


def test_state_file_names_a_release_of_the_manifest(host, node):
    """/etc/r9700ctl/state.json is the node's record of what it was given (r9700_lifecycle writes it)."""
    state = node.need_state()
    assert state.get("schema") == "r9700ctl.state/1"
    releases = node.manifest["rocm_releases"]
    assert state["rocm_version"] in releases, f"{state['rocm_version']} is not one of {', '.join(releases)}"
    pinned = node.var("r9700_rocm_version")
    if pinned not in (None, "", "auto"):
        assert state["rocm_version"] == str(pinned)


def test_state_file_records_the_installed_versions(host, node):
    state = node.need_state()
    assert state["installed"].get("rocm-core") == host.package("rocm-core").version


def test_node_record_shows_the_expected_gpus(host, node):
    """node.json (r9700_node_record) lists the GPUs found; their number is r9700_expected_gpus."""
    if not node.record:
        pytest.fail(f"{node.name}: {'; '.join(node.problems)}")
    expected = node.inventory.get("r9700_expected_gpus")
    if expected is None:
        pytest.skip("r9700_expected_gpus is not set for this host")
    amd_display = [
        g for g in node.record.get("gpus", []) if str(g.get("vendor")).lower() in ("0x1002", "1002")
    ]
    assert len(amd_display) == int(expected)


def test_state_file_records_the_kernel_the_repositories_and_when(host, node):
    """Issue 13: state.json names the running kernel, the repositories and the time it was written."""
    state = node.need_state()
    assert state["kernel"] == host.check_output("uname -r")
    release = node.release
    manifest_paths = [release.rocm_repo_path, release.amdgpu_repo_path, release.graphics_repo_path]
    assert state["repositories"]["paths"] == [p for p in manifest_paths if p], "not the manifest's paths"
    assert state["time"].endswith("Z")


def test_the_running_kernel_is_held_with_the_driver(host, node):
    """r9700_kernel_hold (on by default): the running kernel's installed image and headers are held
    and unattended-upgrades leaves linux-* alone, so the kernel moves only with kernel-upgrade."""
    if not node.var("r9700_kernel_hold"):
        pytest.skip("r9700_kernel_hold is false")
    release = host.check_output("uname -r")
    held = host.check_output("apt-mark showhold").split()
    for package in (f"linux-image-{release}", f"linux-headers-{release}"):
        if host.package(package).is_installed:
            assert package in held, f"{package} is installed but not held"
    assert host.file("/etc/apt/apt.conf.d/51r9700-kernel-hold").contains('"linux-";')
