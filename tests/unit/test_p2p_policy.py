"""The PCIe peer-to-peer policy (r9700ctl/p2p_policy.py) and the sysfs facts it reads (nodefacts.read_p2p).

The fake sysfs trees copy the real layout: /sys/bus/pci/devices/<addr> links into
/sys/devices/pci0000:00/<root port>/<card upstream port>/<card downstream port>/<gpu>, as on an
R9700, whose Navi 48 package carries its own PCIe switch (the Navi 10 XL upstream/downstream ports
1002:1478/1479 of the recorded rx5500-switch-acs lspci); `resource` lines are "start end flags"
with Linux's IORESOURCE_* flags; the ACS capability sits in the extended configuration space.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from r9700ctl import p2p_policy as p2p
from r9700ctl.agent import nodefacts, sysfs
from r9700ctl.agent.units import size_text
from r9700ctl.bundle.model import BundleGpu, BundleReport

GIB = 1024**3
# BAR0 of a real R9700 with Resizable BAR: "Memory at 7000000000 (64-bit, prefetchable) [size=32G]"
# (recorded lspci, r9700ctl/data/recorded/r9700-1x-gigabyte). 0x14220c = IORESOURCE_MEM | PREFETCH |
# MEM_64 | SIZEALIGN, what sysfs prints for a 64-bit prefetchable BAR.
BAR_32G = "0x0000007000000000 0x00000077ffffffff 0x000000000014220c"
BAR_256M = "0x000000c000000000 0x000000c00fffffff 0x000000000014220c"
MMIO_512K = "0x00000000fcd00000 0x00000000fcd7ffff 0x0000000000040200"
EMPTY = "0x0000000000000000 0x0000000000000000 0x0000000000000000"
# ACSCtl of the card's own downstream port in the recorded rx5500-switch-acs lspci:
# "SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+" = 0x001d.
ACS_LINUX_DEFAULT = 0x001D


def config_space(acs_control: int | None, size: int = 4096) -> bytes:
    """A config space with an extended capability chain: AER at 0x100, then ACS at 0x148."""
    data = bytearray(size)
    if size <= 0x100:
        return bytes(data)
    next_offset = 0x148 if acs_control is not None else 0
    data[0x100:0x104] = (0x0001 | (1 << 16) | (next_offset << 20)).to_bytes(4, "little")  # AER
    if acs_control is not None:
        data[0x148:0x14C] = (0x000D | (1 << 16)).to_bytes(4, "little")
        data[0x14C:0x14E] = (0x005F).to_bytes(2, "little")
        data[0x14E:0x150] = acs_control.to_bytes(2, "little")
    return bytes(data)


def add_device(root: Path, chain: list[str], resource: list[str] | None = None, config: bytes | None = None):
    """Create the device at the end of `chain` (root port first) and its /sys/bus/pci/devices link."""
    real = root / "sys/devices/pci0000:00" / Path(*chain)
    real.mkdir(parents=True, exist_ok=True)
    if resource is not None:
        (real / "resource").write_text("\n".join(resource + [EMPTY] * 7) + "\n")
    if config is not None:
        (real / "config").write_bytes(config)
    link = root / "sys/bus/pci/devices" / chain[-1]
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.exists():
        os.symlink(os.path.relpath(real, link.parent), link)
    return real


def r9700_card(root: Path, root_port: str, bus: int, bar: str = BAR_32G, iommu: str | None = "identity"):
    """Root port -> the card's switch (upstream, downstream port) -> the GPU at <bus+2>:00.0."""
    usp, dsp, gpu = f"0000:{bus:02x}:00.0", f"0000:{bus + 1:02x}:00.0", f"0000:{bus + 2:02x}:00.0"
    add_device(root, [root_port], config=config_space(ACS_LINUX_DEFAULT))
    add_device(root, [root_port, usp], config=config_space(None))
    add_device(root, [root_port, usp, dsp], config=config_space(ACS_LINUX_DEFAULT))
    real = add_device(root, [root_port, usp, dsp, gpu], resource=[bar, EMPTY, MMIO_512K])
    if iommu is not None:
        group = root / "sys/kernel/iommu_groups" / str(bus)
        group.mkdir(parents=True, exist_ok=True)
        (group / "type").write_text(iommu + "\n")
        os.symlink(os.path.relpath(group, real), real / "iommu_group")
    return gpu


def gpus(*addresses: str) -> list[p2p.GpuUnderTest]:
    return [p2p.GpuUnderTest(a, 32 * GIB) for a in addresses]


# -- reading sysfs -----------------------------------------------------------------------------------


def test_facts_give_bar_sizes_iommu_group_type_and_the_bridge_path_with_acs(tmp_path):
    gpu = r9700_card(tmp_path, "0000:00:01.1", 0x01)
    facts = nodefacts.read_p2p(str(tmp_path), [gpu])
    info = facts["gpus"][gpu]
    assert info["path"] == ["0000:00:01.1", "0000:01:00.0", "0000:02:00.0", "0000:03:00.0"]
    assert info["bars"][0] == {"index": 0, "size": 32 * GIB, "memory": True, "prefetch": True, "mem64": True}
    assert p2p.largest_prefetchable_bar(info["bars"]) == 32 * GIB
    assert (info["iommu_group"], info["iommu_type"]) == ("1", "identity")
    assert facts["bridges"]["0000:02:00.0"] == {"capability": 0x5F, "control": ACS_LINUX_DEFAULT}
    assert facts["bridges"]["0000:01:00.0"] == {"capability": None, "control": None}


def test_config_space_read_without_root_is_unknown_not_clean(tmp_path):
    """A non-root read of `config` returns 64 bytes: ACS unknown must not pass as 'no redirect'."""
    assert "needs root" in sysfs.acs_from_config(config_space(None, size=64)).error
    assert sysfs.acs_from_config(config_space(None)) == sysfs.AcsRead()  # read, and no ACS capability


def test_the_p2p_facts_are_read_through_the_one_sysfs_reader():
    """Issue 20 item 6: sysfs is read in one place. read_p2p read the IOMMU group, VRAM, the bridge
    path and config space itself; now every file goes through agent/sysfs.py."""
    import inspect

    source = inspect.getsource(nodefacts.read_p2p)
    assert "sysfs." in source
    assert not [word for word in ("open(", "readlink", "_read(", "realpath", "listdir") if word in source]


def test_a_gpu_without_an_iommu_group_means_the_iommu_is_off(tmp_path):
    gpu = r9700_card(tmp_path, "0000:00:01.1", 0x01, iommu=None)
    assert nodefacts.read_p2p(str(tmp_path), [gpu])["gpus"][gpu]["iommu_group"] is None


# -- the decision ---------------------------------------------------------------------------------------


def two_cards(tmp_path: Path, **second) -> tuple[list[str], dict]:
    a = r9700_card(tmp_path, "0000:00:01.1", 0x01)
    b = r9700_card(tmp_path, "0000:00:03.1", 0x05, **second)
    return [a, b], nodefacts.read_p2p(str(tmp_path), [a, b])


def test_auto_turns_p2p_on_where_bar_iommu_and_acs_all_allow_it(tmp_path):
    """Linux's own ACS redirect on each card's switch and on root ports is no reason to refuse."""
    addresses, facts = two_cards(tmp_path)
    decision = p2p.decide("auto", "r9700_p2p=auto", gpus(*addresses), facts)
    assert decision.enabled, decision.blockers
    assert decision.blockers == []


def test_a_small_bar_keeps_auto_off_and_names_the_gpu_and_sizes(tmp_path):
    addresses, facts = two_cards(tmp_path, bar=BAR_256M)
    decision = p2p.decide("auto", "r9700_p2p=auto", gpus(*addresses), facts)
    assert not decision.enabled
    assert decision.reason == (
        "off: 0000:07:00.0: BAR 256 MiB < VRAM 32 GiB "
        "(enable Resizable BAR / Above 4G decoding in the firmware)"
    )


@pytest.mark.parametrize("kind", ["DMA", "DMA-FQ", "unmanaged"])
def test_a_translating_iommu_keeps_auto_off(tmp_path, kind):
    addresses, facts = two_cards(tmp_path, iommu=kind)
    decision = p2p.decide("auto", "r9700_p2p=auto", gpus(*addresses), facts)
    assert (
        not decision.enabled and f"translates its DMA (group 5 type {kind}; add iommu=pt" in decision.reason
    )


@pytest.mark.parametrize(("kind", "said"), [("blocked", "blocked"), ("unknown", "unknown"), ("", "unknown")])
def test_a_group_type_that_does_not_say_passthrough_keeps_auto_off(tmp_path, kind, said):
    """The kernel prints "blocked" (no DMA) and "unknown" (a domain type its sysfs does not name);
    an older kernel has no type file. None is a passthrough, so P2P stays off, as the one IOMMU rule
    (agent/rules/iommu.py) judges them: P2P no longer decides IOMMU by a test of its own."""
    addresses, facts = two_cards(tmp_path, iommu=kind)
    decision = p2p.decide("auto", "r9700_p2p=auto", gpus(*addresses), facts)
    assert not decision.enabled
    assert (
        f"{addresses[1]}: the IOMMU may translate its DMA (group 5 type {said}; add iommu=pt"
        in decision.reason
    )


def test_acs_redirect_on_a_switch_two_gpus_share_keeps_auto_off(tmp_path):
    """Two GPUs behind one PLX-style switch: its downstream ports decide where peer traffic goes."""
    root_port, usp = "0000:00:01.1", "0000:01:00.0"
    add_device(tmp_path, [root_port], config=config_space(ACS_LINUX_DEFAULT))
    add_device(tmp_path, [root_port, usp], config=config_space(None))
    chains = []
    for dsp, gpu in (("0000:02:00.0", "0000:03:00.0"), ("0000:02:01.0", "0000:04:00.0")):
        add_device(tmp_path, [root_port, usp, dsp], config=config_space(ACS_LINUX_DEFAULT))
        add_device(tmp_path, [root_port, usp, dsp, gpu], resource=[BAR_32G])
        chains.append(gpu)
    facts = nodefacts.read_p2p(str(tmp_path), chains)
    assert p2p.ports_between(facts["gpus"][chains[0]]["path"], facts["gpus"][chains[1]]["path"]) == [
        "0000:02:00.0",
        "0000:02:01.0",
    ]
    decision = p2p.decide("auto", "r9700_p2p=auto", gpus(*chains), facts)
    assert not decision.enabled
    assert decision.blockers == [
        "ACS on 0000:02:00.0 redirects peer traffic between 0000:03:00.0 <-> 0000:04:00.0 (control 0x001d)",
        "ACS on 0000:02:01.0 redirects peer traffic between 0000:03:00.0 <-> 0000:04:00.0 (control 0x001d)",
    ]


def test_gpus_on_separate_root_ports_meet_in_the_root_complex_where_acs_is_not_judged():
    assert p2p.ports_between(["a", "b", "c", "gpu1"], ["x", "y", "z", "gpu2"]) == []


def test_missing_facts_keep_auto_off_and_say_where_from():
    decision = p2p.decide("auto", "r9700_p2p=auto", gpus("0000:03:00.0", "0000:04:00.0"), {"source": "lab"})
    assert not decision.enabled
    assert decision.reason == "off: no BAR, IOMMU or ACS facts for 0000:03:00.0, 0000:04:00.0 (from lab)"


def test_one_gpu_has_no_peer_and_off_is_always_off(tmp_path):
    assert p2p.decide("auto", "r9700_p2p=auto", gpus("0000:03:00.0"), {}).reason.startswith("off: 1 GPU(s)")
    addresses, facts = two_cards(tmp_path)
    assert not p2p.decide("off", "r9700_p2p=off", gpus(*addresses), facts).enabled


def test_on_with_unmet_facts_comes_back_with_its_blockers_for_the_caller_to_refuse(tmp_path):
    addresses, facts = two_cards(tmp_path, bar=BAR_256M)
    decision = p2p.decide("on", "r9700_p2p=on", gpus(*addresses), facts)
    assert decision.enabled and decision.blockers


@pytest.mark.parametrize(
    "count, text",
    [
        (30576 * 2**20, "29.9 GiB"),  # an R9700's reported VRAM (mem_info_vram_total)
        (32 * GIB, "32 GiB"),  # its BAR with Resizable BAR on
        (256 * 2**20, "256 MiB"),  # a BAR without it
        (2 * GIB, "2 GiB"),
    ],
)
def test_sizes_have_one_format(count, text):
    assert size_text(count) == text


def test_the_p2p_reason_prints_vram_as_doctor_does(tmp_path):
    """One helper for both: the P2P reason once said 29.8594 GiB where doctor said 30 GiB."""
    addresses, facts = two_cards(tmp_path, bar=BAR_256M)
    facts["gpus"][addresses[1]]["vram_bytes"] = 30576 * 2**20  # read on the node from sysfs
    decision = p2p.decide("auto", "r9700_p2p=auto", gpus(*addresses), facts)
    assert decision.reason.startswith("off: 0000:07:00.0: BAR 256 MiB < VRAM 29.9 GiB ")
    gpu = BundleGpu("0000:03:00.0", "1002", "1002:7551", "R9700", "gfx1201", vram_mib=30576, discrete=True)
    report = BundleReport(tmp_path, "node1", [], [gpu], {}, [], [])
    assert report.overview_lines()[1].endswith("(1002:7551, gfx1201, 29.9 GiB)")  # doctor --bundle
