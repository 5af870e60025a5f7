"""rocminfo parser on real recordings of R9700, RX 9070 XT and an iGPU beside them."""

from __future__ import annotations

from pathlib import Path

from r9700ctl.agent.parsers import rocminfo

RECORDED = Path(__file__).resolve().parents[2] / "r9700ctl" / "data" / "recorded"


def test_three_r9700s_are_three_gfx1201_gpus_with_chip_id_7551_and_their_addresses():
    """Pins ROCm/ROCm#5706: the CPU agent is not a GPU; BDFID becomes the PCI address."""
    info = rocminfo.parse_file(RECORDED / "r9700-3x" / "rocminfo.txt")

    assert info.error is None
    assert (info.rock_module_loaded, info.rock_module_version) == (True, "6.12.12")
    assert (info.runtime_version, info.runtime_ext_version) == ("1.18", "1.14")
    assert [c.marketing_name for c in info.cpus] == ["AMD Ryzen Threadripper 2950X 16-Core Processor"]
    gpus = info.gpus
    assert [g.gfx_target for g in gpus] == ["gfx1201"] * 3
    assert {g.marketing_name for g in gpus} == {"AMD Radeon AI PRO R9700"}
    assert {g.device_id for g in gpus} == {"0x7551"}
    assert [g.bdf for g in gpus] == ["0000:0a:00.0", "0000:0d:00.0", "0000:45:00.0"]
    assert [g.node for g in gpus] == [1, 2, 3]
    assert {(g.compute_units, g.max_clock_mhz, g.wavefront_size) for g in gpus} == {(64, 2350, 32)}
    # 33406976 KiB = 31.86 GiB handed out of the 32 GiB card.
    assert {g.coarse_grained_pool_kib for g in gpus} == {33406976}
    assert gpus[0].isas == ["amdgcn-amd-amdhsa--gfx1201", "amdgcn-amd-amdhsa--gfx12-generic"]


def test_padded_columns_of_a_single_r9700_are_read_without_their_spaces():
    """Pins ROCm/ROCm#5864, whose values carry trailing padding as rocminfo prints it."""
    info = rocminfo.parse_file(RECORDED / "r9700-1x" / "rocminfo.txt")

    assert info.error is None
    (gpu,) = info.gpus
    assert (gpu.name, gpu.marketing_name, gpu.uuid) == (
        "gfx1201",
        "AMD Radeon AI PRO R9700",
        "GPU-11ac8a4bc02c5165",
    )
    assert (gpu.bdf, gpu.device_id, gpu.coarse_grained_pool_kib) == ("0000:23:00.0", "0x7551", 31309824)


def test_an_igpu_beside_the_rx_9070_xt_is_a_second_gpu_agent_marked_apu():
    """Pins ROCm/ROCm#5814: the Raphael iGPU (gfx1036) shows up as a GPU agent of its own."""
    info = rocminfo.parse_file(RECORDED / "rx9070xt-igpu" / "rocminfo.txt")

    assert info.error is None
    dgpu, igpu = info.gpus
    assert (dgpu.gfx_target, dgpu.marketing_name, dgpu.device_id, dgpu.apu_memory) == (
        "gfx1201",
        "AMD Radeon RX 9070 XT",
        "0x7550",
        False,
    )
    assert (dgpu.bdf, dgpu.max_clock_mhz, dgpu.coarse_grained_pool_kib) == ("0000:03:00.0", 2460, 16695296)
    assert (igpu.gfx_target, igpu.marketing_name, igpu.device_id) == (
        "gfx1036",
        "AMD Radeon Graphics",
        "0x13c0",
    )
    assert (igpu.apu_memory, igpu.compute_units, igpu.bdf) == (True, 2, "0000:76:00.0")


def test_a_failing_rocminfo_is_read_as_its_own_failure_quoting_the_runtime():
    """Pins the "hsa api call failure" output (ROCm/ROCm#739) becoming the failure, not an
    unreadable file (issue 22 item 11: rocminfo's own report is read, not called unreadable)."""
    text = "hsa api call failure at line 900, file: /data/rocminfo.cc. Call returned 4104"
    info = rocminfo.parse(text, "rocminfo.txt")

    assert info.agents == []
    assert (info.failure, info.failure_line, info.error) == (text, 1, None)


def test_rock_module_not_loaded_is_reported():
    info = rocminfo.parse("ROCk module is NOT loaded, possibly no GPU devices\n", "rocminfo.txt")

    assert info.rock_module_loaded is False
    assert info.failure == "ROCk module is NOT loaded, possibly no GPU devices"
    assert info.error is None


def test_the_errno_of_dev_kfd_and_rocminfos_group_check_are_read():
    """Bug pinned (issue 22 item 11): the errno after "Unable to open /dev/kfd read-write:" and
    rocminfo's own group line were not read, so every cause got the same usermod advice. The text
    is ROCm/legacy-rocm-build#6166 (an RX 9070 XT whose /dev/kfd was 0666, user in render)."""
    text = (RECORDED / "rx9070xt-kfd-einval" / "rocminfo.txt").read_text()

    info = rocminfo.parse(text, "rocminfo.txt")

    assert (info.kfd_open_error, info.kfd_user, info.kfd_group, info.kfd_member) == (
        "Invalid argument",
        "x1unix",
        "render",
        True,
    )
    assert info.failure == "Unable to open /dev/kfd read-write: Invalid argument"
    assert (info.failure_line, info.rock_module_loaded, info.error) == (3, True, None)


def test_rocminfos_not_a_member_line_is_read_as_not_a_member():
    """rocminfo.cc's wording when the user is not in the group that owns /dev/kfd."""
    text = (
        "ROCk module is loaded\n"
        "Unable to open /dev/kfd read-write: Permission denied\n"
        'ai is not member of "render" group, the default DRM access group. Users must be a member of '
        'the "render" group or another DRM access group in order for ROCm applications to run '
        "successfully.\n"
    )
    info = rocminfo.parse(text, "rocminfo.txt")

    assert (info.kfd_open_error, info.kfd_user, info.kfd_group, info.kfd_member) == (
        "Permission denied",
        "ai",
        "render",
        False,
    )


def test_an_mi300x_vf_is_gfx942_with_304_cus_wave64_and_feature_suffixed_isas():
    """Pins ROCm/ROCm#4677: the data-centre part reads as gfx942 with chip id 0x74b5 (VF)."""
    info = rocminfo.parse_file(RECORDED / "mi300x-vf-1x" / "rocminfo.txt")

    assert info.error is None
    (gpu,) = info.gpus
    assert (gpu.gfx_target, gpu.marketing_name, gpu.device_id) == (
        "gfx942",
        "AMD Instinct MI300X VF",
        "0x74b5",
    )
    assert (gpu.compute_units, gpu.wavefront_size, gpu.max_clock_mhz) == (304, 64, 2100)
    assert gpu.coarse_grained_pool_kib == 200998912
    assert gpu.isas[0] == "amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-"
