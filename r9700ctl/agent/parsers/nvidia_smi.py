"""`nvidia-smi -q -x`: the XML report of every NVIDIA GPU.

Per GPU: product name, bus id, UUID, VBIOS, PCIe generation and width (current and max),
clocks (current and max), power draw and limits, temperatures, framebuffer size and the
clock event reasons ("clocks_throttle_reasons" before driver 535) by name, the names of
EVENT_REASONS, NVML's bit table, which the agent's sampler decodes live masks with (0x4 SW power
cap is expected under load; 0x8/0x40/0x80 HW slowdown, HW thermal, power brake are not).

The XML is parsed with xml.etree (defusedxml is not available on nodes). Real reports
start with `<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_vNN.dtd">`, which is dropped
(expat never fetches it); a DOCTYPE with an internal subset or any ENTITY declaration is
refused, since that is how entity-expansion attacks are built.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from r9700ctl.agent.parsers._common import (
    GpuRecord,
    cannot_read,
    failure,
    from_file,
    never_raises,
    normalise_bdf,
    number,
)

# NVML clocks event reasons (https://docs.nvidia.com/deploy/nvml-api/group__nvmlClocksEventReasons.html):
# the one table of r9700ctl, also the sampler's (kernels/sampler.py). Names as nvidia-smi -q -x
# writes its tags (clocks_event_reason_<name>, data/recorded/nvidia-a100-1x/nvidia-smi.xml); the
# group says what a set bit means: power (the cap, expected under load), thermal and hw_slowdown
# (heat or the board holding the GPU back), idle, other.
EVENT_REASONS = {
    0x1: ("gpu_idle", "idle"),
    0x2: ("applications_clocks_setting", "other"),
    0x4: ("sw_power_cap", "power"),
    0x8: ("hw_slowdown", "hw_slowdown"),
    0x10: ("sync_boost", "other"),
    0x20: ("sw_thermal_slowdown", "thermal"),
    0x40: ("hw_thermal_slowdown", "thermal"),
    0x80: ("hw_power_brake_slowdown", "hw_slowdown"),
    0x100: ("display_clocks_setting", "other"),
}
EVENT_REASON_BITS = {name: bit for bit, (name, _) in EVENT_REASONS.items()}


@dataclass
class NvidiaGpu(GpuRecord):
    """One <gpu> beyond the facts the SMI records share (GpuRecord): its bus id as printed, PCIe
    generations, clocks, the default cap, its one GPU temperature sensor, BAR1, state and MIG."""

    bus_id: str | None = None
    uuid: str | None = None
    pcie_gen: int | None = None
    pcie_max_gen: int | None = None
    clocks_mhz: dict[str, float] = field(default_factory=dict)
    max_clocks_mhz: dict[str, float] = field(default_factory=dict)
    power_cap_default_w: float | None = None
    temperature_gpu_c: float | None = None
    bar1_total_mib: float | None = None
    performance_state: str | None = None
    mig_mode: str | None = None
    clocks_event_reasons: dict[str, bool] = field(default_factory=dict)


@dataclass
class NvidiaSmiReport:
    source: str
    driver_version: str | None = None
    cuda_version: str | None = None
    attached_gpus: int | None = None
    gpus: list[NvidiaGpu] = field(default_factory=list)
    error: str | None = None


_failed = failure(NvidiaSmiReport)


_EXTERNAL_DOCTYPE = re.compile(r"<!DOCTYPE\s+\w+\s+SYSTEM\s+\"[^\"<>\[\]]*\"\s*>")


@never_raises(_failed)
def parse(text: str, source: str = "nvidia-smi.xml") -> NvidiaSmiReport:
    start = text.find("<?xml")
    if start < 0:
        start = text.find("<nvidia_smi_log")
    if start < 0:
        return _failed(source, "no <nvidia_smi_log> document in it")
    body = text[start:]
    if "<!ENTITY" in body or re.search(r"<!DOCTYPE[^>]*\[", body):
        return _failed(
            source, "refused: the XML declares entities or an inline DTD, which nvidia-smi never does"
        )
    body = _EXTERNAL_DOCTYPE.sub("", body, count=1)
    if "<!DOCTYPE" in body:
        return _failed(source, "refused: unexpected DOCTYPE declaration")
    try:
        root = ET.fromstring(body)
    except ET.ParseError as exc:
        return _failed(source, f"XML is cut short or broken ({exc})")
    if root.tag != "nvidia_smi_log":
        return _failed(source, f"root element is <{root.tag}>, not <nvidia_smi_log>")
    report = NvidiaSmiReport(source=source)
    report.driver_version = _text(root.find("driver_version"))
    report.cuda_version = _text(root.find("cuda_version"))
    attached = number(_text(root.find("attached_gpus")))
    report.attached_gpus = int(attached) if attached is not None else None
    report.gpus = [_gpu(node) for node in root.findall("gpu")]
    if not report.gpus:
        report.error = cannot_read(source, "the report lists no <gpu>")
    return report


def _text(node: ET.Element | None) -> str | None:
    if node is None or node.text is None:
        return None
    value = node.text.strip()
    return None if value in ("", "N/A", "[N/A]", "Not Supported", "[Not Supported]") else value


def _num(node: ET.Element | None) -> float | None:
    value = number(_text(node))
    return float(value) if value is not None else None


def _int(node: ET.Element | None) -> int | None:
    value = number((_text(node) or "").rstrip("x"))
    return int(value) if value is not None else None


def _gpu(node: ET.Element) -> NvidiaGpu:
    gpu = NvidiaGpu(bus_id=node.get("id") or _text(node.find("pci/pci_bus_id")))
    gpu.bdf = normalise_bdf(gpu.bus_id)
    gpu.name = _text(node.find("product_name"))
    gpu.uuid = _text(node.find("uuid"))
    gpu.serial = _text(node.find("serial"))
    gpu.vbios_version = _text(node.find("vbios_version"))
    link = "pci/pci_gpu_link_info"
    gpu.pcie_gen = _int(node.find(f"{link}/pcie_gen/current_link_gen"))
    gpu.pcie_max_gen = _int(node.find(f"{link}/pcie_gen/max_link_gen"))
    gpu.pcie_width = _int(node.find(f"{link}/link_widths/current_link_width"))
    gpu.pcie_max_width = _int(node.find(f"{link}/link_widths/max_link_width"))
    for section, target in (("clocks", gpu.clocks_mhz), ("max_clocks", gpu.max_clocks_mhz)):
        holder = node.find(section)
        for child in list(holder) if holder is not None else []:
            value = _num(child)
            if value is not None:
                target[child.tag.removesuffix("_clock")] = value
    # Driver 535+ moved power under gpu_power_readings; older ones have power_readings.
    power = node.find("gpu_power_readings")
    if power is None:
        power = node.find("power_readings")
    if power is not None:
        gpu.power_w = _num(power.find("power_draw")) or _num(power.find("instant_power_draw"))
        gpu.power_cap_w = _num(power.find("current_power_limit")) or _num(power.find("power_limit"))
        gpu.power_cap_default_w = _num(power.find("default_power_limit"))
        gpu.power_cap_max_w = _num(power.find("max_power_limit"))
    gpu.temperature_gpu_c = _num(node.find("temperature/gpu_temp"))
    gpu.temperature_mem_c = _num(node.find("temperature/memory_temp"))
    gpu.vram_total_mib = _num(node.find("fb_memory_usage/total"))
    gpu.bar1_total_mib = _num(node.find("bar1_memory_usage/total"))
    gpu.performance_state = _text(node.find("performance_state"))
    gpu.mig_mode = _text(node.find("mig_mode/current_mig"))
    reasons = node.find("clocks_event_reasons")
    prefix = "clocks_event_reason_"
    if reasons is None:
        reasons, prefix = node.find("clocks_throttle_reasons"), "clocks_throttle_reason_"
    for child in list(reasons) if reasons is not None else []:
        state = _text(child)
        if child.tag.startswith(prefix) and state is not None:
            gpu.clocks_event_reasons[child.tag[len(prefix) :]] = state.lower() == "active"
    return gpu


def parse_file(path: str | Path) -> NvidiaSmiReport:
    return from_file(parse, _failed, path)
