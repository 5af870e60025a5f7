"""The driver and ROCm at the versions of the resolved repositories, and the linker entry."""

from __future__ import annotations

import re

import pytest


def policy_source(host, package: str) -> tuple[str | None, str]:
    """(installed version, the lines under it in `apt-cache policy PACKAGE`)."""
    text = host.run(f"apt-cache policy {package}").stdout
    match = re.search(r"^ \*\*\* (\S+) \d+\n((?:\s{8}.*\n?)*)", text, re.MULTILINE)
    return (match.group(1), match.group(2)) if match else (None, text)


def from_the_manifests_repository(host, node, package: str, path: str) -> str:
    """The installed version of PACKAGE, held to come from the manifest's repository PATH at the pin
    priority (apt-cache policy lists the sources of each version); returns that version."""
    installed, sources = policy_source(host, package)
    assert installed, f"{package} is not installed"
    priority = int(node.var("r9700_repo_pin_priority"))
    assert f"{priority} {node.base_url}/{path} " in sources, (
        f"{package} {installed} is not from {node.base_url}/{path} (the manifest's repository of "
        f"ROCm {node.release.version}): apt-cache policy lists {sources.split() or 'no source'}"
    )
    return installed


@pytest.mark.parametrize("role", ["driver", "core"])
def test_installed_version_comes_from_the_pinned_repository(host, node, role):
    """R20, asserted with apt-cache policy against the manifest: the installed version is one the
    release's repository offers (a version from elsewhere fails even if state.json records it)."""
    if role == "driver" and node.var("r9700_driver_source") != "dkms":
        pytest.skip(f"r9700_driver_source is {node.var('r9700_driver_source')}: no amdgpu-dkms installed")
    release = node.release
    package = "amdgpu-dkms" if role == "driver" else "rocm-core"
    path = release.amdgpu_repo_path if role == "driver" else release.rocm_repo_path
    from_the_manifests_repository(host, node, package, path)


def test_rocm_core_is_the_resolved_release(host, node):
    """rocm-core's version starts with the ROCm release (7.1.1.70101-...)."""
    version = host.package("rocm-core").version
    assert version.startswith(f"{node.release.version}."), (
        f"rocm-core {version} is not ROCm {node.release.version}"
    )


@pytest.mark.parametrize(
    "package",
    [
        "rocm",
        "rocm-hip-runtime",
        "rocm-hip-libraries",
        "rocm-language-runtime",
        "rocm-ml-libraries",
        "rocm-opencl-runtime",
        "rocm-hip-sdk",
    ],
)
def test_requested_meta_packages_are_installed_at_the_release(host, node, package):
    """Each package of r9700_rocm_packages (or the manifest's set) is installed at the release, from
    the release's repository."""
    if package not in node.rocm_packages:
        pytest.skip(f"{package} was not requested on this node")
    release = node.release
    installed = from_the_manifests_repository(host, node, package, release.rocm_repo_path)
    assert installed.startswith(f"{release.version}."), f"{package} {installed} is not ROCm {release.version}"


def test_dynamic_linker_knows_the_rocm_libraries(host, node):
    conf = host.file("/etc/ld.so.conf.d/r9700-rocm.conf")
    listed = [line for line in conf.content_string.splitlines() if line and not line.startswith("#")]
    assert listed == list(node.var("r9700_rocm_library_dirs"))


def test_dkms_builds_in_parallel(host, node):
    if node.var("r9700_driver_source") != "dkms":
        pytest.skip("no DKMS build on this node")
    assert re.search(
        r"^parallel_jobs=\d+$", host.file("/etc/dkms/framework.conf.d/r9700.conf").content_string, re.M
    )


def test_no_reboot_is_pending(host, node):
    """A changed driver or command line is applied only by a reboot; reported as 'reboot required'."""
    marker = host.file("/var/lib/r9700ctl/reboot-required")
    reasons = marker.content_string.strip().replace("\n", "; ") if marker.exists else ""
    assert not marker.exists, f"reboot required: {node.name} ({reasons})"


@pytest.mark.runtime
def test_amdgpu_is_loaded_on_a_booted_node(host, node):
    if not node.runtime:
        pytest.skip("runtime steps are off on this node (no systemd: image build or lab)")
    assert host.file("/sys/module/amdgpu").is_directory
    if node.var("r9700_driver_source") == "dkms":
        assert host.file("/sys/module/amdgpu/version").exists, "the loaded amdgpu is not AMD's DKMS module"
