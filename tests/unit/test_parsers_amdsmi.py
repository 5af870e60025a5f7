"""amd-smi parsers on real recorded outputs (r9700ctl/data/recorded, tests/fixtures/amdsmi).

The values asserted are the ones visible in the recordings; each file's first line names
its public source.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from r9700ctl.agent.parsers import amdsmi
from r9700ctl.agent.parsers.throttle import GROUPS, decode_indep_throttle

ROOT = Path(__file__).resolve().parents[2]
RECORDED = ROOT / "r9700ctl" / "data" / "recorded"
FIXTURES = ROOT / "tests" / "fixtures" / "amdsmi"


def recorded_json_body(path: Path) -> str:
    """The recording minus its "# source:" line: what amd-smi itself printed."""
    return path.read_text(encoding="utf-8").split("\n", 1)[1]


def test_the_r9700_table_gives_two_gpus_with_their_addresses_caps_and_vram():
    """Pins reading plain `amd-smi` of 2x R9700 (ROCm/ROCm#5706): BDFs, 300 W cap, 32624 MB."""
    report = amdsmi.parse_file(RECORDED / "r9700-2x" / "amd-smi.txt")

    assert report.error is None
    assert report.shape == "table"
    assert (report.amd_smi_version, report.amdgpu_version, report.rocm_version) == (
        "26.2.1+fc0010cf6a",
        "6.16.6",
        "7.2.0",
    )
    assert report.vbios_version == "00158742"
    assert report.platform == "Linux Baremetal"
    assert [g.bdf for g in report.gpus] == ["0000:03:00.0", "0000:43:00.0"]
    assert [g.index for g in report.gpus] == [0, 1]
    assert all("R9700" in (g.name or "") for g in report.gpus)
    assert [g.power_cap_w for g in report.gpus] == [300.0, 300.0]
    assert [g.power_w for g in report.gpus] == [103.0, 92.0]
    assert [g.temperature_edge_c for g in report.gpus] == [79.0, 80.0]
    assert [g.vram_total_mib for g in report.gpus] == [32624.0, 32624.0]
    assert [g.gfx_activity_pct for g in report.gpus] == [100.0, 100.0]
    # The fan column prints "38.82" for one card and "40.0 %" for the other.
    assert [g.fan_pct for g in report.gpus] == [38.82, 40.0]
    assert len(report.processes) == 8
    assert {p.pid for p in report.processes} == {213534, 213890, 213952, 213953}


def test_the_igpu_row_has_no_power_cap_and_its_own_small_vram():
    """Pins the R9700 + iGPU table (ROCm/ROCm#5832): "N/A/0 W" must not become a 0 W cap."""
    report = amdsmi.parse_file(RECORDED / "r9700-igpu" / "amd-smi.txt")

    assert report.error is None
    r9700, igpu = report.gpus
    assert (r9700.bdf, r9700.power_cap_w, r9700.vram_total_mib) == ("0000:03:00.0", 300.0, 30576.0)
    assert (igpu.bdf, igpu.name) == ("0000:0d:00.0", "AMD Radeon Graphics")
    assert igpu.power_cap_w is None
    assert igpu.power_w is None
    assert igpu.temperature_edge_c is None
    assert igpu.vram_total_mib == 2048.0


def test_bare_list_static_json_gives_ids_bus_vram_cap_and_vbios():
    """Pins the older amd-smi bare-list `static --json` (RX 6600), which has no gfx target."""
    report = amdsmi.parse_file(RECORDED / "rx6600-1x" / "amd-smi-static.json")

    assert report.error is None
    assert report.shape == "list"
    (gpu,) = report.gpus
    assert gpu.index == 0
    assert gpu.bdf == "0000:0b:00.0"
    assert (gpu.vendor_id, gpu.device_id, gpu.rev_id) == ("0x1002", "0x73ff", "0xc7")
    assert gpu.gfx_target is None
    assert (gpu.pcie_max_speed_gts, gpu.pcie_max_width, gpu.pcie_interface_version) == (16.0, 16, "Gen 4")
    assert gpu.vram_total_mib == 8176.0
    assert (gpu.vram_type, gpu.vram_vendor) == ("GDDR6", "MICRON")
    assert gpu.power_cap_w == 100.0
    assert (gpu.driver_name, gpu.driver_version) == ("amdgpu", "7.0.0-3-pve")
    assert gpu.vbios_version == "020.003.000.030.000000"
    assert (gpu.numa_node, gpu.numa_affinity) == (0, -1)


def test_bare_list_metric_json_gives_clocks_temperatures_link_and_throttle_state():
    """Pins `metric --json`: value/unit objects, "N/A" clocks dropped, UNTHROTTLED decoded."""
    report = amdsmi.parse_file(RECORDED / "rx6600-1x" / "amd-smi-metric.json")

    assert report.error is None
    (gpu,) = report.gpus
    assert gpu.clocks["gfx_0"] == amdsmi.Clock(800.0, 500.0, 2750.0)
    assert gpu.clocks["mem_0"] == amdsmi.Clock(541.0, 96.0, 875.0)
    assert "gfx_1" not in gpu.clocks  # all N/A
    assert (gpu.temperature_edge_c, gpu.temperature_hotspot_c, gpu.temperature_mem_c) == (36.0, 37.0, 32.0)
    assert (gpu.pcie_speed_gts, gpu.pcie_width) == (16.0, 8)
    assert gpu.pcie_replay_count is None
    assert gpu.power_w == 6.0
    assert (gpu.throttle_status, gpu.throttled) == ("UNTHROTTLED", False)
    assert (gpu.vram_total_mib, gpu.vram_used_mib) == (8176.0, 202.0)


def test_static_and_metric_merge_into_one_gpu_with_max_and_trained_link():
    """Pins merge(): the metric entry has no BDF, so it joins the static one by index."""
    static = amdsmi.parse_file(RECORDED / "rx6600-1x" / "amd-smi-static.json")
    metric = amdsmi.parse_file(RECORDED / "rx6600-1x" / "amd-smi-metric.json")

    (gpu,) = amdsmi.merge(static, metric)

    assert gpu.bdf == "0000:0b:00.0"
    assert (gpu.pcie_max_width, gpu.pcie_width) == (16, 8)
    assert gpu.power_cap_w == 100.0
    assert gpu.clocks["gfx_0"].max_mhz == 2750.0


def test_topology_json_gives_links_with_type_weight_and_hops():
    report = amdsmi.parse_file(RECORDED / "rx6600-1x" / "amd-smi-topology.json")

    assert report.error is None
    assert report.links == [
        amdsmi.AmdSmiLink(0, 0, "0000:0b:00.0", "0000:0b:00.0", "SELF", 0, 0, "ENABLED", None)
    ]


def test_the_gpu_data_shape_of_a_real_r9700_metric_is_read_up_to_where_it_was_cut():
    """Pins the 26.x {"gpu_data": [...]} shape on the only R9700 JSON published (cut by `head`)."""
    report = amdsmi.parse_file(FIXTURES / "metric-r9700-gpu0-head40.json")

    assert report.shape == "gpu_data"
    assert report.error is not None and "cut short at line 41" in report.error
    assert report.error.startswith("could not read metric-r9700-gpu0-head40.json: ")
    (gpu,) = report.gpus
    assert (gpu.index, gpu.gfx_activity_pct) == (0, 100.0)


def test_warnings_printed_before_the_json_are_skipped_and_kept_for_evidence():
    """Pins amd-smi on Python 3.14 printing SyntaxWarnings ahead of its gpu_data JSON."""
    report = amdsmi.parse_file(FIXTURES / "static-rx7800xt-gpu_data-warnings-excerpt.json")

    assert report.shape == "gpu_data"
    assert any("SyntaxWarning" in line for line in report.skipped_lines)
    (gpu,) = report.gpus
    assert (gpu.name, gpu.gfx_target, gpu.device_id) == ("AMD Radeon RX 7800 XT", "gfx1101", "0x747e")
    assert (gpu.bdf, gpu.pcie_max_width, gpu.num_compute_units) == ("0000:03:00.0", 16, 60)
    assert gpu.serial == "0x4162405E51BB99B0"  # what the history follows a card by
    assert "cut short" in (report.error or "")


def test_both_json_shapes_give_the_same_gpus():
    """Pins shape independence: the bare-list recording wrapped in gpu_data (derived here at
    test time, not a recording) reads the same as the recording itself."""
    body = recorded_json_body(RECORDED / "rx6600-1x" / "amd-smi-static.json")
    bare = amdsmi.parse(body, "bare")
    wrapped = amdsmi.parse(json.dumps({"gpu_data": json.loads(body)}), "wrapped")

    assert (bare.shape, wrapped.shape) == ("list", "gpu_data")
    assert bare.gpus == wrapped.gpus


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        pytest.param('{"error": "no gpu"}', "not amd-smi GPU output", id="object-without-gpus"),
        pytest.param("[]", "listed no GPUs", id="empty-list"),
        pytest.param("AMDSMI_STATUS_NO_PERM", "no JSON document", id="error-text"),
        pytest.param("", "no JSON document", id="empty"),
    ],
)
def test_outputs_without_gpus_say_why_in_one_line(text, reason):
    report = amdsmi.parse(text, "amd-smi-static.json")

    assert report.gpus == []
    assert report.error is not None
    assert report.error.startswith("could not read amd-smi-static.json: ")
    assert reason in report.error


def test_old_megahertz_pcie_speed_without_unit_is_read_as_gigatransfers():
    """Pins the older amd-smi that printed max_pcie_speed 32000 (MT/s) as a bare number."""
    (gpu,) = amdsmi.parse('[{"gpu": 0, "bus": {"max_pcie_speed": 32000, "max_pcie_width": 16}}]').gpus

    assert gpu.pcie_max_speed_gts == 32.0


@pytest.mark.parametrize(
    ("raw", "groups"),
    [
        pytest.param(0, {}, id="idle"),
        pytest.param(1 << 0, {"power": ["PPT0"]}, id="ppt0-at-the-cap"),
        pytest.param(1 << 36, {"thermal": ["TEMP_HOTSPOT"]}, id="hotspot"),
        pytest.param(
            (1 << 47) | (1 << 16), {"current": ["TDC_GFX"], "prochot": ["PROCHOT_GFX"]}, id="prochot"
        ),
        pytest.param(1 << 57, {"other": ["FIT"]}, id="other"),
    ],
)
def test_indep_throttle_bits_decode_into_the_kernels_groups(raw, groups):
    """Pins the SMU_THROTTLER_*_BIT numbers of amdgpu_smu.h: power 0-7, current 16-23,
    temperature 32-45, PROCHOT 46-47, other 56-57."""
    decoded = decode_indep_throttle(raw)

    assert {g: getattr(decoded, g) for g in GROUPS if getattr(decoded, g)} == groups


def test_indep_throttle_status_is_found_wherever_amd_smi_puts_it():
    """Pins reading the field under any section (amd-smi moved it between versions)."""
    text = (
        '[{"gpu": 0, "power": {"throttle_status": "THROTTLED"},'
        ' "throttle": {"indep_throttle_status": "0x1000000001"}}]'
    )
    (gpu,) = amdsmi.parse(text).gpus

    assert gpu.throttled is True
    assert gpu.indep_throttle_status == (1 << 36) | 1
    assert gpu.throttle is not None
    assert (gpu.throttle.power, gpu.throttle.thermal) == (["PPT0"], ["TEMP_HOTSPOT"])


def test_the_older_limit_section_gives_the_range_set_power_cap_accepts():
    """Pins limit.{min,max,socket}_power of the bare-list amd-smi (RX 6600: 94-100 W, cap 100 W)."""
    (gpu,) = amdsmi.parse_file(RECORDED / "rx6600-1x" / "amd-smi-static.json").gpus

    assert (gpu.power_cap_min_w, gpu.power_cap_max_w, gpu.power_cap_w) == (94.0, 100.0, 100.0)


def test_the_rocm_7_2_limit_section_reads_ppt0_and_ignores_an_absent_ppt1():
    """Pins the 26.x limit.ppt0.*_power_limit shape; PPT1 "N/A" must not blank PPT0's values."""
    report = amdsmi.parse_file(FIXTURES / "static-limit-ppt0-changelog.json")

    assert report.error is None
    (gpu,) = report.gpus
    assert (gpu.power_cap_min_w, gpu.power_cap_max_w, gpu.power_cap_w) == (0.0, 203.0, 100.0)
