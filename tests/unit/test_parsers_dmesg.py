"""Kernel log and RCCL log parsers on real excerpts with amdgpu and RCCL trouble."""

from __future__ import annotations

from pathlib import Path

from r9700ctl.agent.parsers import dmesg, rccl

ROOT = Path(__file__).resolve().parents[2]
RECORDED = ROOT / "r9700ctl" / "data" / "recorded"
FIXTURES = ROOT / "tests" / "fixtures"


def test_an_r9700_that_fails_init_gives_init_and_probe_failures_with_line_and_address():
    """Pins ROCm/ROCm#5706 comment 26: "Fatal error during GPU init" then "probe ... failed"."""
    report = dmesg.parse_file(RECORDED / "r9700-vm-initfail" / "dmesg.txt")

    assert report.error is None
    assert [(f.kind, f.line, f.bdf) for f in report.findings] == [
        ("init_failed", 8, "0000:01:00.0"),
        ("probe_failed", 10, "0000:01:00.0"),
    ]
    assert report.lines_read == 9


def test_page_faults_on_the_rx_9070_xt_are_counted_with_their_lines():
    """Pins ROCm/ROCm#5814 with `dmesg -H` timestamps, including a "[12月25 19:09]" one."""
    report = dmesg.parse_file(RECORDED / "rx9070xt-igpu" / "dmesg.txt")

    assert report.error is None
    assert report.kinds == {"page_fault": 4}
    assert [f.line for f in report.of_kind("page_fault")] == [2, 12, 15, 18]
    assert {f.bdf for f in report.findings} == {"0000:03:00.0"}


def test_mes_failure_gpu_reset_and_page_fault_are_told_apart():
    """Pins ROCm/ROCm#2429: MES timeout, then a GPU reset, then a page fault."""
    report = dmesg.parse_file(FIXTURES / "dmesg" / "rx7900-mes-reset.txt")

    assert [(f.kind, f.line) for f in report.findings] == [
        ("mes", 2),
        ("mes", 4),
        ("gpu_reset", 8),
        ("page_fault", 10),
    ]
    reset = report.of_kind("gpu_reset")[0]
    assert (reset.line, reset.bdf) == (8, "0000:0e:00.0")


def test_smu_version_mismatch_is_noted_but_not_serious():
    report = dmesg.parse_file(FIXTURES / "dmesg" / "r9700-smu-mismatch.txt")

    assert report.kinds == {"smu_mismatch": 1}
    assert report.serious == []


def test_lines_of_other_drivers_are_not_findings():
    report = dmesg.parse("[    1.0] nouveau 0000:01:00.0: *ERROR* something\n[    2.0] usb 1-1: new device\n")

    assert report.findings == []
    assert report.amdgpu_lines == 0


def test_rccl_startup_warnings_about_iommu_and_fine_grain_pcie_are_found():
    """Pins ROCm/rccl#1026: RCCL's own (misspelled) start-up warnings."""
    log = rccl.parse_file(FIXTURES / "rccl" / "mi250x-startup-warnings.log")

    assert log.error is None
    assert [f.line for f in log.of_kind("missing_iommu_pt")] == [8]
    assert [f.line for f in log.of_kind("missing_amd_iommu")] == [6]
    assert len(log.of_kind("missing_fine_grain_pcie")) == 2
    assert log.nccl_lines == 8


def test_rccl_ipc_failure_and_version_are_found():
    """Pins ROCm/rccl#908: hipIpcGetMemHandle failed, RCCL 2.18.3."""
    log = rccl.parse_file(FIXTURES / "rccl" / "ipc-handle-failure.log")

    assert log.has("ipc_failure")
    assert log.has("missing_iommu_pt")
    assert log.rccl_version == "2.18.3+hip5.5"


def test_rccl_transports_and_p2p_disable_are_counted():
    text = (
        "n:1:1 [0] NCCL INFO NCCL_P2P_DISABLE set by environment to 1\n"
        "n:1:1 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via SHM/direct/direct\n"
        "n:1:1 [1] NCCL INFO Channel 00 : 1[1] -> 0[0] via P2P/IPC\n"
    )
    log = rccl.parse(text)

    assert log.has("p2p_disabled")
    assert log.transports == {"SHM": 1, "P2P": 1}


def test_a_log_without_timestamps_or_pci_prefixes_is_a_kernel_log_with_its_gpus_id_and_gfx_ip():
    """Bug pinned (issue 22 item 13): FreeBSD drm-kmod's log of an RX 9070 XT ("[drm] ...", "drmn0:",
    no timestamps) was "could not read dmesg.txt: no kernel log lines". amdgpu's start-up lines
    give the chip (0x7550) and GFX IP 12 whatever an override makes rocminfo print."""
    report = dmesg.parse_file(FIXTURES / "dmesg" / "rx9070xt-freebsd-untimed.txt")

    assert report.error is None
    device = report.devices[""]
    assert (device.pci_id, device.revision, device.gfx_ip, device.gfx_major) == (
        "1002:7550",
        "c0",
        "gfx_v12_0",
        12,
    )


def test_ip_blocks_are_kept_per_pci_address():
    report = dmesg.parse_file(FIXTURES / "dmesg" / "w7900-ip-blocks.txt")

    assert {bdf: d.gfx_ip for bdf, d in report.devices.items()} == {"0000:03:00.0": "gfx_v11_0"}


def test_start_up_lines_without_an_address_belong_to_the_only_gpu_the_log_names():
    """Kernel 6.8 prints "[drm] initializing kernel modesetting (IP DISCOVERY 0x1002:0x7551 ...)"
    without the address its later lines give (ROCm/ROCm#5706 comment 26)."""
    report = dmesg.parse_file(RECORDED / "r9700-vm-initfail" / "dmesg.txt")

    assert {bdf: (d.pci_id, d.revision) for bdf, d in report.devices.items()} == {
        "0000:01:00.0": ("1002:7551", "c0")
    }


def test_the_smu_not_answering_the_previous_command_is_its_own_kind_even_without_a_prefix():
    """Issue 22 item 13: "SMU: I'm not done with your previous command" (ROCm/legacy-rocm-build#2196),
    also when the paste dropped the "amdgpu 0000:0d:00.0:" prefix."""
    with_prefix = dmesg.parse_file(RECORDED / "amd-smu-busy" / "dmesg.txt")
    bare = dmesg.parse(
        "SMU: I'm not done with your previous command: SMN_C2PMSG_66:0x00000012\n", "dmesg.txt"
    )

    assert [(f.kind, f.line, f.bdf) for f in with_prefix.of_kind("smu_busy")] == [
        ("smu_busy", 2, "0000:0d:00.0"),
        ("smu_busy", 5, "0000:0d:00.0"),
        ("smu_busy", 7, "0000:0d:00.0"),
    ]
    assert [f.kind for f in bare.findings] == ["smu_busy"] and bare.error is None
