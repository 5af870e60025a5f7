"""The GPU records of the AMD SMI, ROCm SMI and nvidia-smi parsers name the same facts alike.

Issue 20 item 9: the same reading had three names (temperature_hotspot_c in amd-smi's record,
temperature_junction_c in rocm-smi's; socket_power_w, power_w and power_draw_w), so code that read
one tool's record missed the fact in another's. The records are plain data, never written to a JSON
document as they are (the agent's GpuInfo and the bundle's BundleGpu take values from them under
their own names), so the old names reach no report.
"""

from __future__ import annotations

from dataclasses import fields

import pytest

from r9700ctl.agent.parsers._common import AmdGpuRecord, GpuRecord
from r9700ctl.agent.parsers.amdsmi import AmdSmiGpu
from r9700ctl.agent.parsers.nvidia_smi import NvidiaGpu
from r9700ctl.agent.parsers.rocmsmi import RocmSmiCard

RECORDS = {"amd-smi": AmdSmiGpu, "rocm-smi": RocmSmiCard, "nvidia-smi": NvidiaGpu}
# The facts more than one tool reports, by the one name each record uses for them.
SHARED = {
    "name": ("amd-smi", "rocm-smi", "nvidia-smi"),
    "serial": ("amd-smi", "rocm-smi", "nvidia-smi"),
    "vbios_version": ("amd-smi", "rocm-smi", "nvidia-smi"),
    "power_w": ("amd-smi", "rocm-smi", "nvidia-smi"),
    "power_cap_w": ("amd-smi", "rocm-smi", "nvidia-smi"),
    "power_cap_max_w": ("amd-smi", "nvidia-smi"),
    "temperature_edge_c": ("amd-smi", "rocm-smi"),
    "temperature_hotspot_c": ("amd-smi", "rocm-smi"),
    "temperature_mem_c": ("amd-smi", "rocm-smi", "nvidia-smi"),
    "vram_total_mib": ("amd-smi", "rocm-smi", "nvidia-smi"),
    "pcie_width": ("amd-smi", "rocm-smi", "nvidia-smi"),
    "pcie_max_width": ("amd-smi", "nvidia-smi"),
    "pcie_speed_gts": ("amd-smi", "rocm-smi"),
}
RETIRED = (
    "temperature_junction_c",
    "socket_power_w",
    "power_draw_w",
    "power_limit_w",
    "temperature_memory_c",
    "memory_total_mib",
    "market_name",
    "product_name",
    "asic_serial",
)


@pytest.mark.parametrize("fact", sorted(SHARED))
def test_a_fact_several_tools_report_has_one_name_in_every_record(fact):
    for tool in SHARED[fact]:
        assert fact in {f.name for f in fields(RECORDS[tool])}, f"{tool}'s record lacks {fact}"


def test_the_shared_facts_are_declared_once_in_the_record_every_tool_extends():
    """One declaration of the shared names (parsers/_common.py), so a record cannot drift from it."""
    assert all(issubclass(record, GpuRecord) for record in RECORDS.values())
    assert issubclass(AmdSmiGpu, AmdGpuRecord) and issubclass(RocmSmiCard, AmdGpuRecord)
    shared_by_all = {fact for fact, tools in SHARED.items() if len(tools) == len(RECORDS)}
    assert shared_by_all <= {f.name for f in fields(GpuRecord)}
    assert set(SHARED) <= {f.name for f in fields(AmdGpuRecord)}


def test_no_record_keeps_a_tool_specific_name_for_a_shared_fact():
    for tool, record in RECORDS.items():
        assert not {f.name for f in fields(record)} & set(RETIRED), tool
