"""/proc/cmdline and /etc/os-release parsers on real recordings."""

from __future__ import annotations

from pathlib import Path

import pytest

from r9700ctl.agent.parsers import cmdline, osrelease

ROOT = Path(__file__).resolve().parents[2]
RECORDED = ROOT / "r9700ctl" / "data" / "recorded"
FIXTURES = ROOT / "tests" / "fixtures"


def test_the_r9700_nodes_cmdline_has_iommu_passthrough_and_an_amdgpu_option():
    """Pins ROCm/ROCm#5706: amd_iommu=on iommu=pt amdgpu.mes=0, which RCCL's warning asks for."""
    line = cmdline.parse_file(RECORDED / "r9700-2x" / "cmdline.txt")

    assert line.error is None
    assert (line.iommu, line.amd_iommu, line.intel_iommu) == ("pt", "on", None)
    assert line.iommu_passthrough is True
    assert line.iommu_disabled is False
    assert line.amdgpu == {"mes": "0"}
    assert line.boot_image == "/vmlinuz-6.8.0-90-generic"
    assert line.params["ro"] is None
    assert line.pci_noacs is False


@pytest.mark.parametrize(
    ("text", "passthrough", "noacs"),
    [
        pytest.param("quiet splash", False, False, id="nothing-set"),
        pytest.param("iommu.passthrough=1 pci=realloc,noacs", True, True, id="passthrough-and-noacs"),
        pytest.param("iommu=pt iommu=nopt", False, False, id="last-one-wins"),
    ],
)
def test_iommu_and_acs_switches_are_recognised(text, passthrough, noacs):
    line = cmdline.parse(text)

    assert (line.iommu_passthrough, line.pci_noacs) == (passthrough, noacs)


def test_more_than_one_line_is_not_a_kernel_command_line():
    assert cmdline.parse("a=1\nb=2\n", "cmdline.txt").error == (
        "could not read cmdline.txt: expected the one line of /proc/cmdline, found 2 lines"
    )


def test_debian_12_os_release_gives_the_manifest_key_and_codename():
    """Pins Debian's own base-files os-release: key "debian-12" as the manifest names OSes."""
    release = osrelease.parse_file(FIXTURES / "osrelease" / "debian-12.txt")

    assert release.error is None
    assert (release.id, release.version_id, release.codename) == ("debian", "12", "bookworm")
    assert release.key == "debian-12"
    assert release.pretty_name == "Debian GNU/Linux 12 (bookworm)"


def test_an_os_release_without_id_is_not_one():
    release = osrelease.parse("NAME=x\n", "os-release")

    assert release.key is None
    assert release.error == "could not read os-release: no ID= line, not an os-release file"
