"""The manifest is the one source of truth: its facts must stay true and its shape stable.

Pins the article's errors (ROCm 6.3.2 cannot drive gfx1201; 9.4.2 is MI300's target) and the
keys other code reads (lab, doctor, roles), so an edit that breaks them fails here first.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from r9700ctl import manifest as manifest_module
from r9700ctl.manifest import Manifest, os_key


@pytest.fixture(scope="module")
def manifest() -> Manifest:
    return manifest_module.load()


def test_rocm_632_has_no_gfx1201_and_641_is_the_first_that_does(manifest):
    """gfx1201 support starts at ROCm 6.4.1 (release notes); the article's 6.3.2 cannot drive an R9700."""
    assert not manifest.release("6.3.2").supports_gfx("gfx1201")
    supporting = manifest.releases_supporting({"gfx1201"})
    assert supporting[0] == "6.4.1"
    assert "6.3.2" not in supporting


def test_releases_run_from_632_to_the_current_7x_in_version_order(manifest):
    """The brief asks for 6.3.2 through the current 7.x; release_names() sorts by version, not text."""
    names = manifest.release_names()
    assert names[0] == "6.3.2"
    assert names[-1].startswith("7.")
    assert names == sorted(names, key=manifest_module.version_key)


def test_the_r9700_and_rx9070_are_gfx1201_and_mi300x_is_gfx942(manifest):
    """PCI ids from pci.ids / rocminfo; the lookup ignores case because sysfs prints lower-case hex."""
    assert manifest.gpu("1002:7551").gfx == "gfx1201"
    assert manifest.gpu("1002:7551").name == "AMD Radeon AI PRO R9700"
    assert manifest.gpu("1002:7550").gfx == "gfx1201"
    assert manifest.gpu("1002:74A1").gfx == "gfx942"
    assert manifest.gpu("1002:744c").gfx == "gfx1100"
    assert manifest.gpu("1002:164e").discrete is False


def test_hsa_override_9_4_2_names_mi300s_target_in_another_family_than_the_r9700(manifest):
    """The article's HSA_OVERRIDE_GFX_VERSION=9.4.2 is gfx942 (CDNA3); the R9700 is RDNA4."""
    assert manifest.gfx_for_hsa_version("9.4.2") == "gfx942"
    assert manifest.gfx_family("gfx942") == "CDNA3"
    assert manifest.gfx_family("gfx1201") == "RDNA4"
    assert manifest.hsa_version("gfx1201") == "12.0.1"


def test_debian_12_uses_amds_jammy_suite_and_ubuntu_its_own(manifest):
    """AMD's Debian instructions (conf.py debian_version_numbers) install the jammy packages on Debian 12."""
    for name in manifest.releases_supporting(set(), "debian-12"):
        assert manifest.release(name).suite_for("debian-12") == "jammy"
    for name in manifest.release_names():
        rel = manifest.release(name)
        assert rel.suite_for("ubuntu-24.04") == "noble"
        assert rel.suite_for("ubuntu-22.04") == "jammy"


def test_amd_lists_radeon_targets_only_on_ubuntu(manifest):
    """Compatibility-matrix footnotes: Debian 12 is Instinct-only; the roles treat it as best effort."""
    rel = manifest.release("7.1.1")
    assert not rel.lists_target_on("gfx1201", "debian-12")
    assert rel.lists_target_on("gfx1201", "ubuntu-24.04")
    assert rel.lists_target_on("gfx942", "debian-12")


def test_repository_urls_follow_amds_layout(manifest):
    """rocm/apt/<version> and amdgpu/<driver>/ubuntu, the driver numbered 30.x from ROCm 7.0 on."""
    repo = manifest.repository
    rel = manifest.release("7.1.1")
    assert repo.rocm_url(rel) == "https://repo.radeon.com/rocm/apt/7.1.1"
    assert repo.amdgpu_url(rel) == "https://repo.radeon.com/amdgpu/30.20.1/ubuntu"
    assert (
        repo.amdgpu_url(manifest.release("6.4.1"), "http://mirror:8080/")
        == "http://mirror:8080/amdgpu/6.4.1/ubuntu"
    )
    assert re.fullmatch(r"[0-9A-F]{40}", repo.key_fingerprint)
    assert repo.pin_priority == 600


@pytest.mark.parametrize("version", manifest_module.load().release_names())
def test_every_release_carries_the_keys_the_roles_and_the_lab_read(manifest, version):
    """amdgpu, rocm_path, gfx, os, pytorch_image and a source: a missing one breaks a role or the lab."""
    raw = manifest.release(version).raw
    for key in ("amdgpu", "rocm_path", "gfx", "os", "pytorch_image", "source"):
        assert raw.get(key), f"{version} lacks {key}"
    for target in raw["gfx"]:
        assert manifest.gfx_family(target), f"{version}: {target} missing from gfx_targets"
    for system in raw["os"]:
        assert manifest.os_release(system), f"{version}: {system} missing from os_releases"
    for target, systems in (raw.get("gfx_os") or {}).items():
        assert target in raw["gfx"]
        assert set(systems) <= set(raw["os"])
    assert raw["pytorch_image"].startswith(f"rocm/pytorch:rocm{version}")


def test_every_gpu_os_and_package_entry_names_its_source(manifest):
    """Every manifest entry names its source (the manifest's header)."""
    for pci, gpu in manifest.gpus.items():
        assert re.fullmatch(r"1002:[0-9a-f]{4}", pci)
        assert gpu.raw.get("source"), pci
        assert manifest.gfx_family(gpu.gfx), pci
    for system in manifest.os_keys():
        assert manifest.os_release(system).get("source"), system
    assert manifest.raw["packages"].get("source")
    assert manifest.raw["repository"].get("source")


def test_package_sets_name_the_meta_packages(manifest):
    """The default set is the rocm meta package; the runtime set is a subset of AMD's meta packages."""
    pkgs = manifest.packages
    assert pkgs.default == ("rocm",)
    assert set(pkgs.runtime) <= set(pkgs.meta)
    assert pkgs.core == "rocm-core"
    assert pkgs.driver == "amdgpu-dkms"


def test_newest_supporting_resolves_auto_per_os(manifest):
    """`auto` resolves to the newest release supporting every target on the OS; none for an unknown OS."""
    assert manifest.newest_supporting({"gfx1201"}, "ubuntu-24.04") == manifest.release_names()[-1]
    assert manifest.newest_supporting({"gfx1201"}, "ubuntu-20.04") is None


def test_os_key_matches_the_manifest_keys():
    """Preflight builds the key from os-release ID and VERSION_ID."""
    assert os_key("Ubuntu", "24.04") == "ubuntu-24.04"
    assert os_key("debian", "12") == "debian-12"


@pytest.mark.parametrize(
    ("pci_id", "revision", "name", "vram_gib"),
    [
        ("1002:7551", "0xc0", "AMD Radeon AI PRO R9700", 32),
        ("1002:7551", "c8", "AMD Radeon AI PRO R9600D", None),
        ("1002:7550", "c0", "AMD Radeon RX 9070 XT", 16),
        ("1002:7550", "0xC3", "AMD Radeon RX 9070", 16),
        ("1002:7550", "c2", "AMD Radeon RX 9070 GRE", None),
        ("1002:744c", "c8", "AMD Radeon RX 7900 XTX", 24),
        ("1002:744c", "cc", "AMD Radeon RX 7900 XT", 20),
        ("1002:744c", "ce", "AMD Radeon RX 7900 GRE", 16),
        ("1002:7550", "", "AMD Radeon RX 9070 XT / 9070 / 9070 GRE", None),
        ("1002:744c", "0xd0", "AMD Radeon RX 7900 XTX / XT / GRE", None),
    ],
)
def test_products_sharing_a_device_id_are_told_apart_by_revision_else_their_figures_are_unknown(
    manifest, pci_id, revision, name, vram_gib
):
    """Issue 9 item 8: 1002:7550 is the RX 9070 XT, 9070 and 9070 GRE; 1002:744c the 7900 XTX, XT
    and GRE (libdrm's amdgpu.ids). One card's figures must never be another product's."""
    spec = manifest.gpu_spec(pci_id, revision)
    assert (spec["name"], spec["vram_gib"]) == (name, vram_gib)
    assert spec["board_power_w"] is None or pci_id == "1002:7551"


def test_no_manifest_source_cites_a_document_outside_this_repository_or_a_third_party_mirror():
    text = (Path(__file__).resolve().parents[2] / "r9700ctl" / "data" / "manifest.yaml").read_text()
    # (notes outside the repository: tests/unit/test_citations.py, for every file)
    for banned in ("alanina/", "roboalchemist/"):
        assert banned not in text, banned


@pytest.mark.parametrize("version", manifest_module.load().release_names())
def test_every_release_lists_its_kernel_lines_on_every_system_it_installs_on(manifest, version):
    """Preflight judges the running kernel by these (issue 22 item 2): a system without lines would
    never be judged."""
    release = manifest.release(version)
    for system in release.os:
        lines = release.kernel_lines(system)
        assert lines and all(re.fullmatch(r"\d+\.\d+", line) for line in lines.values()), (version, system)


def test_amds_kernel_lines_for_ubuntu_move_from_6_11_to_6_14_hwe_with_rocm_7():
    """AMD's system requirements: 24.04.2 "6.8 [GA], 6.11 [HWE]" for 6.4.x, 24.04.3 "6.8 [GA],
    6.14 [HWE]" for 7.x; 22.04.5 "5.15 [GA], 6.8 [HWE]" throughout."""
    m = manifest_module.load()
    assert m.release("6.4.1").kernel_lines("ubuntu-24.04") == {"GA": "6.8", "HWE": "6.11"}
    for version in ("7.0.2", "7.1.1", "7.2.3"):
        assert m.release(version).kernel_lines("ubuntu-24.04") == {"GA": "6.8", "HWE": "6.14"}
    assert {m.release(v).kernel_lines("ubuntu-22.04")["HWE"] for v in m.release_names()} == {"6.8"}
    assert "ROCm/amdgpu/issues/192" in m.release("6.4.1").dkms_build_fails("6.14")
    assert m.release("7.1.1").dkms_build_fails("6.14") is None


@pytest.mark.parametrize(
    ("release", "line"),
    [
        ("6.8.0-49-generic", "6.8"),
        ("6.14.0-24-generic", "6.14"),
        ("5.15.0-105-generic", "5.15"),
        ("6.1.0-18-amd64", "6.1"),
        ("6.18.44-fc-v1147", "6.18"),
        ("6.11rc3", "6.11"),
        ("", ""),
        ("weird", ""),
    ],
)
def test_a_kernel_release_names_its_line(release, line):
    assert manifest_module.kernel_line(release) == line


def test_the_first_release_of_a_target_is_the_first_release_the_matrix_lists_it_in(manifest):
    """gfx_targets' first_rocm must agree with rocm_releases: 6.4.1 is where gfx1201 and gfx1200
    start, and no release before it lists them (issue 22 item 10 judges unlisted releases by it)."""
    for target, entry in manifest.raw["gfx_targets"].items():
        first = entry.get("first_rocm")
        if not first:
            continue
        assert manifest.releases_supporting({target})[0] == first, target
    assert (manifest.first_release("gfx1201"), manifest.first_release("gfx1100")) == ("6.4.1", None)


@pytest.mark.parametrize(
    ("printed", "ids"),
    [
        ("Navi 48 [Radeon AI PRO R9700]", ["1002:7551"]),
        ("Navi 48 [Radeon RX 9070/9070 XT/9070 GRE]", ["1002:7550"]),
        ("Navi 48 [Radeon RX 9070/9070 XT]", ["1002:7550"]),  # a pci.ids from before the GRE
        ("Navi 48", ["1002:7550", "1002:7551"]),  # the chip alone: both, neither guessed
        ("Strix Halo [Radeon Graphics / Radeon 8050S Graphics / Radeon 8060S Graphics]", ["1002:1586"]),
        ("Navi 10 [Radeon RX 5600 OEM/5600 XT / 5700/5700 XT]", []),
    ],
    ids=["r9700", "rx9070", "older-pci-ids", "chip-only", "strix-halo", "unknown"],
)
def test_the_names_lspci_prints_without_nn_find_their_devices(manifest, printed, ids):
    assert sorted(m.pci_id for m in manifest.devices_named(printed)) == ids


def test_every_recognised_device_names_its_source_and_a_known_target(manifest):
    for pci, device in manifest.devices.items():
        assert re.fullmatch(r"1002:[0-9a-f]{4}", pci)
        assert device.raw.get("source"), pci
        assert manifest.gfx_family(device.gfx), pci
    assert not set(manifest.raw["device_targets"]) & set(manifest.gpus)  # one entry per id
