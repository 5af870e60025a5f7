"""lspci -vvv -nn parser on real recordings: an R9700 with a 32G BAR (lspci -vnn, no root)
and a Radeon behind the card's own PCIe switch with ACS redirect on (lspci -vvvnnPP)."""

from __future__ import annotations

from pathlib import Path

from r9700ctl.agent.parsers import lspci

RECORDED = Path(__file__).resolve().parents[2] / "r9700ctl" / "data" / "recorded"


def test_an_r9700_shows_a_64_bit_prefetchable_bar_as_large_as_its_32_gib_of_vram():
    """Pins clbr/radeontop#184: the large BAR P2P needs, read without root."""
    report = lspci.parse_file(RECORDED / "r9700-1x-gigabyte" / "lspci.txt")

    assert report.error is None
    (gpu,) = report.gpus("1002")
    assert gpu.bdf == "0000:0a:00.0"
    assert (gpu.class_code, gpu.pci_id, gpu.revision) == ("0300", "1002:7551", "c0")
    assert "Radeon AI PRO R9700" in gpu.description
    assert gpu.subsystem == "Gigabyte Technology Co., Ltd Device [1458:242f]"
    assert gpu.largest_prefetchable_bar_bytes == 32 * 2**30
    big = gpu.bars[0]
    assert (big.kind, big.bits, big.prefetchable, big.address) == ("memory", 64, True, "7000000000")
    assert (gpu.bars[2].kind, gpu.bars[2].size_bytes) == ("io", 256)
    rom = gpu.bars[-1]
    assert (rom.kind, rom.disabled, rom.size_bytes) == ("rom", True, 128 * 1024)
    assert gpu.capabilities_denied is True
    assert (gpu.link_cap, gpu.link_status) == (None, None)
    assert (gpu.driver, gpu.modules) == ("amdgpu", ["amdgpu"])


def test_a_gpu_behind_a_switch_lists_its_bridges_and_the_acs_redirect_on_the_downstream_port():
    """Pins the lore.kernel.org recording: ReqRedir+ CmpltRedir+ on the switch port above the GPU."""
    report = lspci.parse_file(RECORDED / "rx5500-switch-acs" / "lspci.txt")

    assert report.error is None
    assert [f.bdf for f in report.functions] == [
        "0000:00:01.0",
        "0000:01:00.0",
        "0000:02:00.0",
        "0000:03:00.0",
    ]
    (gpu,) = report.gpus()
    assert gpu.path == ["0000:00:01.0", "0000:01:00.0", "0000:02:00.0"]
    assert [b.bdf for b in report.upstream_of(gpu.bdf)] == ["0000:02:00.0", "0000:01:00.0", "0000:00:01.0"]
    downstream = report.by_bdf("02:00.0")
    assert downstream is not None and downstream.is_bridge
    assert downstream.pci_id == "1002:1479"
    assert downstream.acs_redirects == ["ReqRedir", "CmpltRedir"]
    assert downstream.acs_cap["EgressCtrl"] is False
    assert gpu.acs_redirects == []
    assert (downstream.secondary_bus, downstream.subordinate_bus) == ("03", "03")


def test_links_are_read_per_end_and_a_gen3_x8_root_port_is_not_called_downgraded():
    report = lspci.parse_file(RECORDED / "rx5500-switch-acs" / "lspci.txt")

    root = report.by_bdf("0000:00:01.0")
    gpu = report.by_bdf("0000:03:00.0")
    assert root is not None and gpu is not None
    assert (root.link_cap.speed_gts, root.link_cap.width) == (8.0, 8)
    assert (root.link_status.speed_gts, root.link_status.width) == (8.0, 8)
    assert (root.link_status.speed_downgraded, root.link_status.width_downgraded) == (False, False)
    assert (gpu.link_status.speed_gts, gpu.link_status.width) == (8.0, 16)
    # A 256M BAR, far below the VRAM of any such card: the "small BAR" P2P cannot use.
    assert gpu.largest_prefetchable_bar_bytes == 256 * 2**20
    # amdgpu is available as a module but no driver is bound to this function.
    assert (gpu.driver, gpu.modules) == (None, ["amdgpu"])
    assert (gpu.first_line, gpu.last_line) == (215, 293)


def test_lspcis_own_downgraded_flags_are_read_as_it_prints_them():
    """Only what lspci printed: whether a link is below what BOTH ends support is the agent's one
    rule (agent/checks/pcie.judge_link, which doctor --bundle uses too)."""
    title = "VGA compatible controller [0300]: Advanced Micro Devices, Inc. [AMD/ATI] Device [1002:7551]"
    text = (
        f"01:00.0 {title}\n"
        "\t\tLnkCap:\tPort #0, Speed 32GT/s, Width x16, ASPM L1\n"
        "\t\tLnkSta:\tSpeed 2.5GT/s (downgraded), Width x16 (ok)\n"
        f"02:00.0 {title}\n"
        "\t\tLnkCap:\tPort #0, Speed 32GT/s, Width x16\n"
        "\t\tLnkSta:\tSpeed 32GT/s, Width x8\n"
    )
    first, second = lspci.parse(text).functions

    assert (first.link_status.speed_downgraded, first.link_status.width_downgraded) == (True, False)
    assert (second.link_status.speed_downgraded, second.link_status.width_downgraded) == (False, False)


def test_text_without_pci_functions_says_so():
    report = lspci.parse("lspci: Cannot open /sys/bus/pci/devices\n", "lspci.txt")

    assert report.functions == []
    assert (
        report.error == "could not read lspci.txt: no PCI function lines ('00:01.0 Class [code]: ...') in it"
    )


def test_lspci_without_nn_gives_the_vendor_from_its_name_and_keeps_the_device_name():
    """Bug pinned (issue 22 item 14): `lspci | grep VGA` as owners post it (ROCm/legacy-rocm-build
    #6166) has no [1002:7550]: the function had no vendor, so no GPU was found."""
    report = lspci.parse((RECORDED / "rx9070xt-kfd-einval" / "lspci.txt").read_text(), "lspci.txt")

    [gpu] = report.functions
    assert (gpu.bdf, gpu.vendor_id, gpu.device_id, gpu.device_name, gpu.is_display) == (
        "0000:03:00.0",
        "1002",
        None,
        "Navi 48",
        True,
    )
    assert report.error is None


def test_an_unnamed_device_gives_its_id_and_the_cpu_side_amd_vendor_is_not_the_gpus():
    """Older pci.ids print "Device 7551"; "Advanced Micro Devices, Inc. [AMD]" is 1022 (the CPU
    side), "[AMD/ATI]" is 1002 (pci.ids)."""
    text = (
        "0a:00.0 VGA compatible controller: Advanced Micro Devices, Inc. [AMD/ATI] Device 7551 (rev c0)\n"
        "00:00.0 Host bridge: Advanced Micro Devices, Inc. [AMD] Device 14d8\n"
    )
    gpu, host = lspci.parse(text, "lspci.txt").functions

    assert (gpu.pci_id, gpu.revision) == ("1002:7551", "c0")
    assert (host.pci_id, host.is_display) == ("1022:14d8", False)
