"""Telemetry sampled under load: parsing each source, decoding throttle bits, summarising.

The throttle verdict rests on these: a power-cap bit must read as "power" (expected under
load), a Radeon TEMP_HOTSPOT bit without a hot reading must not read as thermal throttling
(ROCm/rocm-systems#11781), and runs of samples must be counted right.
"""

from __future__ import annotations

import struct
import time
from pathlib import Path

import pytest

from r9700ctl.agent.kernels import sampler

# Recorded on the lent NVIDIA H200 (driver 580.159.04) on 2026-12-02 with
# `nvidia-smi --query-gpu=<sampler.NVIDIA_SMI_FIELDS> --format=csv,noheader,nounits`, idle.
H200_IDLE = "00000000:00:06.0, 375, 3201, 33, 108.18, 700.00, 700.00, 0x0000000000000001, 5, 16\n"


def test_nvidia_smi_row_is_parsed_into_a_sample_by_pci_address():
    """The row maps to the torch index whose PCI address matches (8- or 4-digit domain)."""
    (s,) = sampler.parse_nvidia_smi_csv(H200_IDLE, 1.5, [(0, "0000:00:06.0")])
    assert (s.gpu, s.t) == (0, 1.5)
    assert (s.sclk_mhz, s.mclk_mhz, s.temp_c) == (375.0, 3201.0, 33.0)
    assert (s.power_w, s.power_cap_w, s.power_cap_default_w) == (108.18, 700.0, 700.0)
    assert s.throttle_raw == 1
    assert s.reasons == ["gpu_idle"]
    assert s.groups == ["idle"]
    assert (s.link_speed_gts, s.link_width) == (32.0, 16)


def test_not_available_cells_become_none_not_zero():
    """'[N/A]' must not read as 0 W or 0 MHz (a zero would look like a dead card)."""
    row = "00000000:00:06.0, [N/A], 3201, 33, [N/A], 700.00, [N/A], [N/A], 5, 16\n"
    (s,) = sampler.parse_nvidia_smi_csv(row, 0.0, [(0, None)])
    assert s.sclk_mhz is None
    assert s.power_w is None
    assert s.throttle_raw is None


@pytest.mark.parametrize(
    ("mask", "groups"),
    [
        (0x4, ["power"]),
        (0x20, ["thermal"]),
        (0x40, ["thermal"]),
        (0x8 | 0x4, ["power", "hw_slowdown"]),
        (0x80, ["hw_slowdown"]),
        (0x1000, ["other"]),
    ],
    ids=["sw-power-cap", "sw-thermal", "hw-thermal", "hw-slowdown+power", "power-brake", "unknown-bit"],
)
def test_nvidia_clock_event_reasons_fall_into_groups(mask, groups):
    """0x4 (SW power cap) is the expected state of an H200 under GEMM (docs/benchmarks.md); 0x20/0x40
    are not."""
    assert sampler.decode_nvidia(mask)[1] == groups


def test_radeon_power_and_current_bits_are_named():
    """PPT0 (bit 0) is power, TDC_GFX (bit 16) current, PROCHOT_GFX (bit 47) prochot."""
    names, groups = sampler.decode_amd((1 << 0) | (1 << 16) | (1 << 47), None, 95.0)
    assert names == ["PPT0", "TDC_GFX", "PROCHOT_GFX"]
    assert groups == ["power", "current", "prochot"]


def test_radeon_temp_hotspot_bit_counts_only_with_a_hot_reading():
    """ROCm/rocm-systems#11781: R9700 firmware sets TEMP_HOTSPOT at 37 C idle; only >= 95 C is thermal."""
    assert sampler.decode_amd(1 << 36, 37.0, 95.0)[1] == ["thermal_unconfirmed"]
    assert sampler.decode_amd(1 << 36, None, 95.0)[1] == ["thermal_unconfirmed"]
    assert sampler.decode_amd(1 << 36, 101.0, 95.0)[1] == ["thermal"]
    assert sampler.decode_amd(1 << 34, 40.0, 95.0)[1] == ["thermal"]  # TEMP_MEM is taken at its word


def _metrics_v1_3(hotspot: int, gfxclk: int, uclk: int, indep: int) -> bytes:
    """A gpu_metrics v1.3 table; values of the first fields as libdrm-amdgpu-sys-rs#7 printed them."""
    values = [120, 1, 3, 38, hotspot, 57, 38, 39, 39, 0, 1, 0, 10, 0, 2748118101619]
    values += [5, 65535, 29, 25, 25, 25, 25]  # average clocks
    values += [gfxclk, 65535, uclk, 25, 25, 25, 25]  # current clocks
    values += [0x2, 0, 16, 320, 0, 0, 0, 0, 0, 0, 0, 0, 780, 699, 666, 0, indep]
    return struct.pack("<HBB6H3HHQQ7H7HIHHHHII4HQ3HHQ", *values)


def test_gpu_metrics_v1_3_is_120_bytes_and_decoded():
    """structure_size 120 (as the kernel reports for v1.3); clocks, hotspot and indep bits read back."""
    blob = _metrics_v1_3(hotspot=41, gfxclk=2350, uclk=1258, indep=(1 << 0) | (1 << 36))
    assert len(blob) == 120
    fields = sampler.parse_gpu_metrics(blob)
    assert fields["temperature_hotspot"] == 41
    assert fields["current_gfxclk"] == 2350
    assert fields["indep_throttle_status"] == (1 << 0) | (1 << 36)


def test_other_gpu_metrics_layouts_are_not_misread():
    """v1.4+ (MI300) and v2.x (APUs) have other layouts: None rather than wrong numbers."""
    blob = bytearray(_metrics_v1_3(41, 2350, 1258, 0))
    blob[3] = 4  # content_revision 4
    assert sampler.parse_gpu_metrics(bytes(blob)) is None
    assert sampler.parse_gpu_metrics(b"\x00" * 16) is None


def _fake_radeon(root: Path, pci: str, upstream: str) -> None:
    dev = root / "sys/bus/pci/devices" / pci
    hw = dev / "hwmon/hwmon3"
    hw.mkdir(parents=True)
    for name, value in {
        "temp1_input": "52000",
        "temp2_input": "61000",
        "temp3_input": "70000",
        "power1_average": "280000000",
        "power1_cap": "250000000",
        "power1_cap_default": "300000000",
        "freq1_input": "2100000000",
        "freq2_input": "1258000000",
    }.items():
        (hw / name).write_text(value + "\n")
    (dev / "gpu_metrics").write_bytes(_metrics_v1_3(61, 2104, 1258, (1 << 0) | (1 << 36)))
    (dev / "current_link_speed").write_text("2.5 GT/s PCIe\n")  # the GPU function behind the card's switch
    (dev / "current_link_width").write_text("16\n")
    up = root / "sys/bus/pci/devices" / upstream
    up.mkdir(parents=True)
    (up / "current_link_speed").write_text("32.0 GT/s PCIe\n")
    (up / "current_link_width").write_text("16\n")


def test_radeon_sysfs_source_reads_hwmon_metrics_and_the_cards_upstream_link(tmp_path):
    """Power cap below default, PPT0 as power, TEMP_HOTSPOT at 61 C ignored, link read upstream."""
    _fake_radeon(tmp_path, "0000:03:00.0", "0000:01:00.0")
    source = sampler.pick_source("amd", [(0, "0000:03:00.0")], tmp_path, 95.0, {0: "0000:01:00.0"})
    (s,) = source.read(0.5)
    assert (s.temp_c, s.hotspot_c, s.mem_temp_c) == (52.0, 61.0, 70.0)
    assert (s.power_w, s.power_cap_w, s.power_cap_default_w) == (280.0, 250.0, 300.0)
    assert (s.sclk_mhz, s.mclk_mhz) == (2104.0, 1258.0)
    assert s.groups == ["power", "thermal_unconfirmed"]
    assert (s.link_speed_gts, s.link_width) == (32.0, 16)


def test_summary_counts_fraction_and_longest_run_per_group():
    """5 samples, power cap in 4 (a run of 3), thermal once: the inputs of the verdict."""
    masks = [0x4, 0x4, 0x4, 0x20, 0x4]
    samples = [sampler.Sample(t=k * 0.5, gpu=0, sclk_mhz=1500.0 + k) for k in range(5)]
    for s, m in zip(samples, masks, strict=True):
        s.throttle_raw = m
        s.reasons, s.groups = sampler.decode_nvidia(m)
    summary = sampler.summarize(samples, 0)
    assert summary["samples"] == 5
    assert summary["throttle_groups"]["power"]["count"] == 4
    assert summary["throttle_groups"]["power"]["longest_run"] == 3
    assert summary["throttle_groups"]["thermal"]["fraction"] == pytest.approx(0.2)
    assert summary["sclk_mhz"]["median"] == 1502.0


class _FlakySource:
    name = "flaky"

    def __init__(self) -> None:
        self.calls = 0

    def read(self, t: float) -> list[sampler.Sample]:
        self.calls += 1
        if self.calls == 2:
            raise OSError("device busy")
        return [sampler.Sample(t=t, gpu=0, power_w=100.0)]


def test_sampler_thread_keeps_sampling_after_a_failed_read():
    """A failed read is evidence (errors), never the end of sampling or of the load."""
    source = _FlakySource()
    probe = sampler.Sampler(source, interval_s=0.02).start()
    deadline = time.monotonic() + 30
    while len(probe.samples) < 3 and time.monotonic() < deadline:  # a wait on the condition
        time.sleep(0.01)
    samples = probe.stop()
    assert len(samples) >= 3
    assert probe.errors == ["OSError: device busy"]


def test_sampler_without_a_source_returns_no_samples():
    """No telemetry tool on the node: the load still runs, the throttle check SKIPs."""
    assert sampler.Sampler(None).start().stop() == []


def test_the_sampler_keeps_its_rate_when_a_read_takes_part_of_the_interval():
    """A 10 Hz sampler whose reads take 40 ms must still read ~10 times a second, not ~7."""
    import time as _time

    from r9700ctl.agent.kernels import sampler

    class Slow:
        name = "slow"

        def read(self, t):
            _time.sleep(0.04)
            return [sampler.Sample(t=t, gpu=0, power_w=100.0)]

    probe = sampler.Sampler(Slow(), 0.1).start()
    _time.sleep(2.05)
    samples = probe.stop()

    assert sampler.sample_rate_hz(samples, 0) >= 9.5


def test_the_sampler_and_the_parsers_name_every_throttle_bit_alike():
    """Bug class pinned: the sampler kept its own copies of the NVML and amdgpu bit tables, and named
    0x2 and 0x100 differently from nvidia-smi's XML (which the bundle doctor parses)."""
    from r9700ctl.agent.parsers import nvidia_smi, throttle

    for name, bit in nvidia_smi.EVENT_REASON_BITS.items():
        assert sampler.decode_nvidia(bit)[0] == [name]
    for bit in range(64):
        decoded = throttle.decode_indep_throttle(1 << bit)
        named = [n for group in throttle.GROUPS for n in getattr(decoded, group)]
        if named:
            assert sampler.decode_amd(1 << bit, 101.0, 95.0)[0] == named
