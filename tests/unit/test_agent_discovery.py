"""Discovery on fake sysfs trees laid out like the kernel's (tests/unit/agent_fake_node.py).

The bugs pinned: reading a Radeon card's link at the GPU function (its on-card link) instead of
the card's upstream port, counting an integrated GPU, and pairing torch indices with the wrong
PCI address when the orders differ.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from agent_fake_node import GIB, FakeNode, r9700_node

from r9700ctl.agent import gpus, sysfs
from r9700ctl.agent.checks import pcie

R9700 = "AMD Radeon AI PRO R9700"
RECORDED = Path(__file__).resolve().parents[2] / "r9700ctl/data/recorded"


def _probe(*pcis: str, name: str = R9700, arch: str = "gfx1201") -> dict:
    devices = [
        {
            "index": i,
            "name": name,
            "total_memory": 30576 * 2**20,
            "major": 12,
            "minor": 0,
            "multi_processor_count": 64,
            "gcn_arch": arch,
            "pci": pci,
        }
        for i, pci in enumerate(pcis)
    ]
    return {
        "importable": True,
        "torch": "2.9.1+rocm7.1.1",
        "hip": "7.1.1",
        "cuda": None,
        "available": True,
        "device_count": len(devices),
        "devices": devices,
        "arch_list": [arch],
    }


def _tool(bin_dir: Path, name: str, script: str) -> None:
    bin_dir.mkdir(exist_ok=True)
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def test_four_r9700_cards_are_found_with_their_facts(tmp_path):
    r9700_node(tmp_path, 4)
    found = gpus.discover(tmp_path, {}, use_tools=False)
    assert [g.pci_address for g in found.gpus] == [
        "0000:12:00.0",
        "0000:22:00.0",
        "0000:32:00.0",
        "0000:42:00.0",
    ]
    gpu = found.gpus[0]
    assert (gpu.index, gpu.model, gpu.name, gpu.gfx_target) == (0, R9700, R9700, "gfx1201")
    assert gpu.vram_bytes == 30576 * 2**20
    assert gpu.bar0_bytes == 32 * GIB
    assert gpu.render_node == "/dev/dri/renderD128"
    assert gpu.numa_node == 0 and found.gpus[3].numa_node == 1
    assert gpu.power_cap_w == 300.0
    assert gpu.power_w == 33.0  # hwmon power1_average, microwatts
    assert gpu.temps_c == {"edge": 34.0, "junction": 36.0}
    assert gpu.clocks_mhz == {"sclk": 500.0}
    assert gpu.driver == "amdgpu" and gpu.driver_version == "6.12.12"
    assert gpu.sources == ["sysfs", "kfd"]


def test_a_radeon_link_is_read_at_the_cards_upstream_port_not_the_gpu_function(tmp_path):
    """The GPU function behind the on-card switch reports 2.5 GT/s; the slot link is elsewhere."""
    node = FakeNode(tmp_path)
    port = node.add_root_port("0000:00:01.1", maxi=("16.0 GT/s PCIe", 16))
    bdf = node.add_r9700(0x10, port, link_cur=("16.0 GT/s PCIe", 8), link_max=("32.0 GT/s PCIe", 16))
    link = sysfs.read_link(tmp_path, bdf)
    assert link.at == "0000:10:00.0"
    assert (link.cur_speed_gts, link.cur_width, link.max_speed_gts, link.max_width) == (16.0, 8, 32.0, 16)
    assert (link.endpoint_cur_speed_gts, link.endpoint_cur_width) == (2.5, 16)
    assert (link.slot_port, link.slot_max_speed_gts) == ("0000:00:01.1", 16.0)
    assert pcie.expected_link(link, 32.0, 16).text() == "Gen4 x16"  # what both ends support
    assert link.text() == "Gen4 x8"


def test_an_nvidia_link_is_read_at_the_gpu_itself(tmp_path):
    node = FakeNode(tmp_path)
    bdf = node.add_nvidia("0000:01:00.0", node.add_root_port("0000:00:01.0"))
    link = sysfs.read_link(tmp_path, bdf)
    assert link.at == bdf
    assert link.text() == "Gen1 x16" and link.text(current=False) == "Gen5 x16"


def test_an_integrated_gpu_is_listed_apart_and_torch_indices_skip_it(tmp_path):
    """ROCm/ROCm#5696: an iGPU beside discrete cards; it must not count or take index 0."""
    node = r9700_node(tmp_path, 2)
    node.add_igpu("0000:7a:00.0")
    found = gpus.discover(tmp_path, _probe("0000:7a:00.0", "0000:12:00.0", "0000:22:00.0"), use_tools=False)
    assert [g.pci_address for g in found.ignored] == ["0000:7a:00.0"]
    assert [(g.index, g.pci_address) for g in found.gpus] == [(1, "0000:12:00.0"), (2, "0000:22:00.0")]
    assert any("integrated GPU" in n for n in found.notes)


def test_torch_indices_follow_torch_order_by_pci_address(tmp_path):
    r9700_node(tmp_path, 3)
    found = gpus.discover(tmp_path, _probe("0000:32:00.0", "0000:12:00.0", "0000:22:00.0"), use_tools=False)
    assert [(g.index, g.pci_address) for g in found.gpus] == [
        (0, "0000:32:00.0"),
        (1, "0000:12:00.0"),
        (2, "0000:22:00.0"),
    ]
    assert all("torch" in g.sources for g in found.gpus)


def test_torch_without_pci_addresses_assumes_pci_order_and_says_so(tmp_path):
    r9700_node(tmp_path, 2)
    probe = _probe("x", "y")
    for device in probe["devices"]:
        del device["pci"]
    found = gpus.discover(tmp_path, probe, use_tools=False)
    assert [g.pci_address for g in found.gpus] == ["0000:12:00.0", "0000:22:00.0"]
    assert any("assumed in PCI address order" in n for n in found.notes)


def test_gpus_torch_cannot_see_are_named(tmp_path):
    """HIP_VISIBLE_DEVICES=0 on a 2-GPU node: validate only what torch sees, and say which are hidden."""
    r9700_node(tmp_path, 2)
    found = gpus.discover(tmp_path, _probe("0000:22:00.0"), use_tools=False)
    assert [(g.index, g.pci_address) for g in found.gpus] == [(0, "0000:22:00.0")]
    assert any("does not see 0000:12:00.0" in n for n in found.notes)


def test_nvidia_smi_fills_name_vbios_and_power_limits(tmp_path, monkeypatch):
    """Real recording: telegraf's A100 `nvidia-smi -q -x` (bus 00000000:01:00.0)."""
    node = FakeNode(tmp_path)
    node.add_nvidia("0000:01:00.0", node.add_root_port("0000:00:01.0"))
    bin_dir = tmp_path / "bin"
    _tool(bin_dir, "nvidia-smi", f"cat '{RECORDED / 'nvidia-a100-1x/nvidia-smi.xml'}'\n")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}/usr/bin:/bin")
    found = gpus.discover(tmp_path, {}, use_tools=True)
    gpu = found.gpus[0]
    assert found.tools["nvidia-smi"] == "ok"
    assert gpu.name == "NVIDIA A100-SXM4-80GB" and gpu.model == "NVIDIA A100-SXM4-80GB"
    assert gpu.vbios == "92.00.36.00.02"
    assert gpu.power_cap_w == 500.0 and gpu.power_cap_default_w == 500.0
    assert "nvidia-smi" in gpu.sources


def test_a_missing_vendor_tool_is_a_note_not_a_failure(tmp_path, monkeypatch):
    r9700_node(tmp_path, 1)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    found = gpus.discover(tmp_path, {}, use_tools=True)
    assert len(found.gpus) == 1
    assert found.tools["amd-smi"] == "amd-smi is not installed (not on PATH)"


def test_no_sysfs_and_no_torch_finds_nothing_without_raising(tmp_path):
    found = gpus.discover(tmp_path / "empty", {}, use_tools=False)
    assert found.gpus == [] and found.torch_devices == 0


@pytest.mark.parametrize(
    ("control", "expected"),
    [
        pytest.param(0x001D, {"SrcValid": True, "ReqRedir": True, "CmpltRedir": True}, id="redirect-on"),
        pytest.param(0x0000, {"SrcValid": False, "ReqRedir": False}, id="acs-off"),
    ],
)
def test_acs_control_is_decoded_from_config_space(tmp_path, control, expected):
    node = FakeNode(tmp_path)
    node.add_root_port("0000:00:01.1")
    node.set_acs("0000:00:01.1", control)
    flags = sysfs.acs_control(tmp_path, "0000:00:01.1")
    assert flags is not None
    assert {k: flags[k] for k in expected} == expected


def test_acs_unreadable_without_root_is_none_and_no_capability_is_empty(tmp_path):
    node = FakeNode(tmp_path)
    node.add_root_port("0000:00:01.1")
    node.add_root_port("0000:00:02.1")
    node.set_acs("0000:00:01.1", None, readable=False)
    node.set_acs("0000:00:02.1", None)
    assert sysfs.acs_control(tmp_path, "0000:00:01.1") is None
    assert sysfs.acs_control(tmp_path, "0000:00:02.1") == {}


def test_kfd_nodes_map_gfx_targets_to_pci_addresses(tmp_path):
    r9700_node(tmp_path, 2)
    nodes = sysfs.kfd_nodes(tmp_path)
    assert sorted(nodes) == ["0000:12:00.0", "0000:22:00.0"]
    assert nodes["0000:12:00.0"]["gfx_target_version"] == 120001
    assert nodes["0000:22:00.0"]["drm_render_minor"] == 129


def test_gpus_seen_only_by_torch_are_kept_with_the_vendor_of_the_torch_build(tmp_path):
    """Sandboxes (gVisor) and some containers show no PCI tree: torch's devices are the inventory."""
    # torch 2.11 on CUDA fills gcnArchName with the device name (seen on an H200): not a gfx target.
    probe = _probe("0000:18:00.0", name="NVIDIA H200", arch="NVIDIA H200")
    probe.update(cuda="13.0", hip=None)
    found = gpus.discover(tmp_path / "empty", probe, use_tools=False)
    [gpu] = found.gpus
    assert (gpu.index, gpu.pci_address, gpu.vendor, gpu.model) == (0, "0000:18:00.0", "10de", "NVIDIA H200")
    assert gpu.compute_capability == "12.0"
    assert gpu.gfx_target is None
    assert any("GPUs as torch sees them" in n for n in found.notes)
