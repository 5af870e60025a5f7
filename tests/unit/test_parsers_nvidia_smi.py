"""nvidia-smi -q -x parser on real reports (A100 with MIG, schema v12; Tesla T4, v11)."""

from __future__ import annotations

from pathlib import Path

import pytest

from r9700ctl.agent.parsers import nvidia_smi

ROOT = Path(__file__).resolve().parents[2]
RECORDED = ROOT / "r9700ctl" / "data" / "recorded"
FIXTURES = ROOT / "tests" / "fixtures" / "nvidia_smi"


def test_an_a100_report_gives_link_clocks_power_and_no_event_reason():
    """Pins schema v12 (driver 535): gpu_power_readings and clocks_event_reasons."""
    report = nvidia_smi.parse_file(RECORDED / "nvidia-a100-1x" / "nvidia-smi.xml")

    assert report.error is None
    assert (report.driver_version, report.cuda_version, report.attached_gpus) == ("535.54.03", "12.2", 4)
    (gpu,) = report.gpus
    assert (gpu.name, gpu.bdf, gpu.bus_id) == (
        "NVIDIA A100-SXM4-80GB",
        "0000:01:00.0",
        "00000000:01:00.0",
    )
    assert gpu.uuid == "GPU-513536b6-7d19-9063-b049-1e69664bb298"
    assert gpu.vbios_version == "92.00.36.00.02"
    assert (gpu.pcie_gen, gpu.pcie_max_gen, gpu.pcie_width, gpu.pcie_max_width) == (
        4,
        4,
        16,
        16,
    )
    assert gpu.clocks_mhz == {"graphics": 1275.0, "sm": 1275.0, "mem": 1593.0, "video": 1275.0}
    assert gpu.max_clocks_mhz["sm"] == 1410.0
    assert (gpu.power_w, gpu.power_cap_w, gpu.power_cap_default_w) == (67.03, 500.0, 500.0)
    assert (gpu.temperature_gpu_c, gpu.temperature_mem_c) == (27.0, 44.0)
    assert (gpu.vram_total_mib, gpu.bar1_total_mib) == (81920.0, 131072.0)
    assert gpu.mig_mode == "Enabled"
    assert len(gpu.clocks_event_reasons) == 9
    assert not any(gpu.clocks_event_reasons.values())


def test_an_older_t4_report_uses_power_readings_and_throttle_reasons_and_runs_at_x8():
    """Pins schema v11 (driver 515): the older element names, and a link at x8 of x16."""
    report = nvidia_smi.parse_file(FIXTURES / "tesla-t4-v11.xml")

    assert report.error is None
    (gpu,) = report.gpus
    assert gpu.bdf == "0000:00:1e.0"
    assert (gpu.pcie_width, gpu.pcie_max_width) == (8, 16)
    assert (gpu.power_w, gpu.power_cap_w, gpu.power_cap_default_w) == (26.78, 70.0, 70.0)
    assert gpu.temperature_mem_c is None  # "N/A"
    assert set(gpu.clocks_event_reasons) >= {"sw_power_cap", "hw_slowdown"}
    assert not any(gpu.clocks_event_reasons.values())


def test_active_event_reasons_are_read_by_their_nvml_names():
    text = (
        '<nvidia_smi_log><gpu id="00000000:17:00.0"><clocks_event_reasons>'
        "<clocks_event_reason_sw_power_cap>Active</clocks_event_reason_sw_power_cap>"
        "<clocks_event_reason_hw_thermal_slowdown>Active</clocks_event_reason_hw_thermal_slowdown>"
        "</clocks_event_reasons></gpu></nvidia_smi_log>"
    )
    (gpu,) = nvidia_smi.parse(text).gpus

    active = [name for name, on in gpu.clocks_event_reasons.items() if on]
    assert active == ["sw_power_cap", "hw_thermal_slowdown"]
    assert set(active) <= set(nvidia_smi.EVENT_REASON_BITS)  # the table the sampler decodes with


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(
            '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY e SYSTEM "file:///etc/passwd">]><nvidia_smi_log/>',
            id="external-entity",
        ),
        pytest.param(
            '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa"><!ENTITY b "&a;&a;&a;">]><nvidia_smi_log/>',
            id="entity-expansion",
        ),
    ],
)
def test_entity_declarations_are_refused_before_parsing(text):
    """Pins the XXE / billion-laughs guard: xml.etree would expand internal entities."""
    report = nvidia_smi.parse(text, "nvidia-smi.xml")

    assert report.gpus == []
    assert report.error == (
        "could not read nvidia-smi.xml: refused: the XML declares entities or an inline DTD, "
        "which nvidia-smi never does"
    )


def test_a_document_that_is_not_nvidia_smi_says_what_it_is():
    assert nvidia_smi.parse("<html/>", "nvidia-smi.xml").error == (
        "could not read nvidia-smi.xml: no <nvidia_smi_log> document in it"
    )
