"""amd-smi outputs: `static|metric|list|topology --json` and the plain `amd-smi` table.

The JSON comes in two shapes: amd-smi 26.x wraps the GPUs in {"gpu_data": [...]},
older versions print a bare list. Values are {"value", "unit"} objects, plain numbers,
strings with units or "N/A"; all are normalised to numbers (or None) here. `list --json`
carries no architecture: the gfx target comes from `static` (asic.target_graphics_version).

Nothing here raises on odd input: a result carries `.error` ("could not read FILE:
reason") and whatever could be read before the problem.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from r9700ctl.agent.parsers._common import (
    AmdGpuRecord,
    cannot_read,
    failure,
    from_file,
    json_report,
    never_raises,
    normalise_bdf,
    number,
    quantity,
    text_value,
    to_mib,
)
from r9700ctl.agent.parsers.throttle import ThrottleDecode, decode_indep_throttle


@dataclass
class Clock:
    current_mhz: float | None = None
    min_mhz: float | None = None
    max_mhz: float | None = None


@dataclass
class AmdSmiGpu(AmdGpuRecord):
    """What amd-smi said about one GPU beyond the facts the SMI records share (AmdGpuRecord);
    None where that output did not say."""

    uuid: str | None = None
    vendor_id: str | None = None
    rev_id: str | None = None
    num_compute_units: int | None = None
    hip_id: int | None = None
    kfd_id: int | None = None
    node_id: int | None = None
    vram_type: str | None = None
    vram_vendor: str | None = None
    pcie_max_speed_gts: float | None = None
    pcie_interface_version: str | None = None
    clocks: dict[str, Clock] = field(default_factory=dict)
    # The range `amd-smi set --power-cap` accepts, from `static --limit` (None where not printed);
    # its top is power_cap_max_w.
    power_cap_min_w: float | None = None
    gfx_activity_pct: float | None = None
    fan_pct: float | None = None
    fan_rpm: float | None = None
    throttle_status: str | None = None
    throttled: bool | None = None
    indep_throttle_status: int | None = None
    throttle: ThrottleDecode | None = None
    driver_name: str | None = None
    driver_version: str | None = None
    vbios_part_number: str | None = None


@dataclass
class AmdSmiLink:
    """One GPU-to-GPU entry of `amd-smi topology`."""

    src_index: int | None
    dst_index: int | None
    src_bdf: str | None = None
    dst_bdf: str | None = None
    link_type: str | None = None
    weight: int | None = None
    hops: int | None = None
    status: str | None = None
    bandwidth: str | None = None


@dataclass
class AmdSmiProcess:
    gpu_index: int | None
    pid: int | None
    name: str


@dataclass
class AmdSmiReport:
    """One amd-smi output. `shape` is "gpu_data", "list" or "table"; None if unreadable."""

    source: str
    shape: str | None = None
    gpus: list[AmdSmiGpu] = field(default_factory=list)
    links: list[AmdSmiLink] = field(default_factory=list)
    processes: list[AmdSmiProcess] = field(default_factory=list)
    amd_smi_version: str | None = None
    amdgpu_version: str | None = None
    rocm_version: str | None = None
    vbios_version: str | None = None
    platform: str | None = None
    skipped_lines: list[str] = field(default_factory=list)
    error: str | None = None


_failed = failure(AmdSmiReport)


@never_raises(_failed)
def parse(text: str, source: str = "amd-smi") -> AmdSmiReport:
    """Any amd-smi output: the plain table, or the JSON of static/metric/list/topology."""
    if _TABLE_HEADER.search(text) and not text.lstrip("# \n").startswith(("{", "[")):
        return parse_table(text, source)
    return parse_json(text, source)


def parse_file(path: str | Path) -> AmdSmiReport:
    return from_file(parse, _failed, path)


# --- JSON --------------------------------------------------------------------------


@never_raises(_failed)
def parse_json(text: str, source: str = "amd-smi.json") -> AmdSmiReport:
    document, report = json_report(text, source, AmdSmiReport)
    if document is None:
        return report
    if isinstance(document, dict) and isinstance(document.get("gpu_data"), list):
        report.shape, entries = "gpu_data", document["gpu_data"]
    elif isinstance(document, list):
        report.shape, entries = "list", document
    elif isinstance(document, dict) and "gpu" in document:
        report.shape, entries = "list", [document]
    else:
        keys = ", ".join(sorted(document)[:5]) if isinstance(document, dict) else type(document).__name__
        report.error = report.error or cannot_read(source, f"not amd-smi GPU output (found {keys})")
        return report
    for position, entry in enumerate(entries):
        if not isinstance(entry, dict):
            continue
        report.gpus.append(_gpu_from_entry(entry, position))
        report.links.extend(_links_from_entry(entry))
    if not report.gpus:
        report.error = report.error or cannot_read(source, "amd-smi listed no GPUs")
    return report


def _gpu_from_entry(entry: dict[str, Any], position: int) -> AmdSmiGpu:
    index = _int(entry.get("gpu"))
    gpu = AmdSmiGpu(index=position if index is None else index)
    gpu.bdf = normalise_bdf(text_value(entry.get("bdf")))
    gpu.uuid = text_value(entry.get("uuid"))
    gpu.hip_id = _int(entry.get("hip_id"))
    gpu.kfd_id = _int(entry.get("kfd_id"))
    gpu.node_id = _int(entry.get("node_id"))
    _read_asic(gpu, _section(entry, "asic"))
    _read_bus(gpu, _section(entry, "bus"), _section(entry, "pcie"))
    _read_vbios(gpu, _section(entry, "vbios") or _section(entry, "ifwi"))
    _read_limit(gpu, _section(entry, "limit"))
    _read_driver(gpu, _section(entry, "driver"))
    _read_vram(gpu, _section(entry, "vram"), _section(entry, "mem_usage"))
    _read_numa(gpu, _section(entry, "numa"))
    _read_usage(gpu, _section(entry, "usage"))
    _read_power(gpu, _section(entry, "power"))
    _read_clocks(gpu, _section(entry, "clock"))
    _read_temperature(gpu, _section(entry, "temperature"))
    _read_fan(gpu, _section(entry, "fan"))
    _read_firmware(gpu, entry.get("fw_list") or _section(entry, "firmware").get("fw_list"))
    _read_throttle(gpu, entry)
    return gpu


def _section(entry: dict[str, Any], name: str) -> dict[str, Any]:
    value = entry.get(name)
    return value if isinstance(value, dict) else {}


def _int(value: Any) -> int | None:
    num = number(value)
    return int(num) if num is not None else None


def _float(value: Any) -> float | None:
    num = number(value)
    return float(num) if num is not None else None


def _hex_id(value: Any) -> str | None:
    text = text_value(value)
    return text.lower() if text is not None else None


def _gts(value: Any) -> float | None:
    """A PCIe rate in GT/s from GT/s, MT/s (older amd-smi: 32000) or a bare number."""
    num, unit = quantity(value)
    if num is None:
        return None
    if unit.lower() in ("mt/s", "mts") or (not unit and num > 100):
        return float(num) / 1000
    return float(num)


def _read_asic(gpu: AmdSmiGpu, asic: dict[str, Any]) -> None:
    gpu.name = text_value(asic.get("market_name"))
    gpu.vendor_id = _hex_id(asic.get("vendor_id"))
    gpu.device_id = _hex_id(asic.get("device_id"))
    gpu.subsystem_id = _hex_id(asic.get("subsystem_id"))
    gpu.rev_id = _hex_id(asic.get("rev_id"))
    gpu.serial = text_value(asic.get("asic_serial"))
    gpu.num_compute_units = _int(asic.get("num_compute_units"))
    target = text_value(asic.get("target_graphics_version"))
    # Some builds append features ("gfx1201:xnack-"); the target is what precedes them.
    gpu.gfx_target = target.split(":", 1)[0].lower() if target else None


def _read_bus(gpu: AmdSmiGpu, bus: dict[str, Any], pcie: dict[str, Any]) -> None:
    gpu.bdf = gpu.bdf or normalise_bdf(text_value(bus.get("bdf")))
    gpu.pcie_max_width = _int(bus.get("max_pcie_width"))
    gpu.pcie_max_speed_gts = _gts(bus.get("max_pcie_speed"))
    gpu.pcie_interface_version = text_value(bus.get("pcie_interface_version"))
    # metric's "pcie" section is the link as trained now.
    gpu.pcie_width = _int(pcie.get("width"))
    gpu.pcie_speed_gts = _gts(pcie.get("speed"))
    gpu.pcie_replay_count = _int(pcie.get("replay_count"))


def _read_vbios(gpu: AmdSmiGpu, vbios: dict[str, Any]) -> None:
    gpu.vbios_version = text_value(vbios.get("version"))
    gpu.vbios_part_number = text_value(vbios.get("part_number"))


def _read_limit(gpu: AmdSmiGpu, limit: dict[str, Any]) -> None:
    # Older amd-smi: limit.{socket_power,max_power,min_power}; ROCm 7.2's amd-smi (26.x) moved
    # them to limit.ppt0.{socket,max,min}_power_limit (AMD SMI CHANGELOG, "amd_smi_lib for ROCm
    # 7.2.0": "amd-smi static --limit now has a PPT1 section"). PPT0 is the cap `set --power-cap`
    # changes by default; PPT1 exists on MI300-class parts only.
    for holder in (_section(limit, "ppt0"), limit):
        cap = _first_float(holder, "socket_power_limit", "socket_power", "power_cap")
        if cap is None and not holder:
            continue
        gpu.power_cap_w = cap
        gpu.power_cap_max_w = _first_float(holder, "max_power_limit", "max_power")
        gpu.power_cap_min_w = _first_float(holder, "min_power_limit", "min_power")
        if cap is not None or gpu.power_cap_max_w is not None:
            return


def _first_float(holder: dict[str, Any], *keys: str) -> float | None:
    for key in keys:
        value = _float(holder.get(key))
        if value is not None:
            return value
    return None


def _read_driver(gpu: AmdSmiGpu, driver: dict[str, Any]) -> None:
    gpu.driver_name = text_value(driver.get("name") or driver.get("driver_name"))
    gpu.driver_version = text_value(driver.get("version") or driver.get("driver_version"))


def _read_vram(gpu: AmdSmiGpu, vram: dict[str, Any], mem_usage: dict[str, Any]) -> None:
    gpu.vram_type = text_value(vram.get("type"))
    gpu.vram_vendor = text_value(vram.get("vendor"))
    gpu.vram_total_mib = to_mib(*_quantity_mib(vram.get("size")))
    if gpu.vram_total_mib is None:
        gpu.vram_total_mib = to_mib(*_quantity_mib(mem_usage.get("total_vram")))
    gpu.vram_used_mib = to_mib(*_quantity_mib(mem_usage.get("used_vram")))


def _quantity_mib(value: Any) -> tuple[float | int | None, str]:
    num, unit = quantity(value)
    return num, unit or "MB"


def _read_numa(gpu: AmdSmiGpu, numa: dict[str, Any]) -> None:
    gpu.numa_node = _int(numa.get("node"))
    gpu.numa_affinity = _int(numa.get("affinity"))


def _read_usage(gpu: AmdSmiGpu, usage: dict[str, Any]) -> None:
    gpu.gfx_activity_pct = _float(usage.get("gfx_activity"))


def _read_power(gpu: AmdSmiGpu, power: dict[str, Any]) -> None:
    gpu.power_w = _float(power.get("socket_power"))
    if gpu.power_cap_w is None:
        gpu.power_cap_w = _float(power.get("power_cap") or power.get("power_limit"))
    status = power.get("throttle_status")
    if isinstance(status, bool):
        gpu.throttle_status, gpu.throttled = str(status), status
    elif status is not None:
        gpu.throttle_status = text_value(status)
        word = (gpu.throttle_status or "").upper()
        numeric = number(status)
        if word in ("THROTTLED", "UNTHROTTLED"):
            gpu.throttled = word == "THROTTLED"
        elif numeric is not None:
            gpu.throttled = numeric != 0


def _read_clocks(gpu: AmdSmiGpu, clock: dict[str, Any]) -> None:
    for name, values in clock.items():
        if not isinstance(values, dict):
            continue
        found = Clock(_float(values.get("clk")), _float(values.get("min_clk")), _float(values.get("max_clk")))
        if found != Clock():
            gpu.clocks[name] = found


def _read_temperature(gpu: AmdSmiGpu, temperature: dict[str, Any]) -> None:
    gpu.temperature_edge_c = _float(temperature.get("edge"))
    gpu.temperature_hotspot_c = _float(temperature.get("hotspot", temperature.get("junction")))
    gpu.temperature_mem_c = _float(temperature.get("mem", temperature.get("vram")))


def _read_fan(gpu: AmdSmiGpu, fan: dict[str, Any]) -> None:
    gpu.fan_pct = _float(fan.get("usage"))
    gpu.fan_rpm = _float(fan.get("rpm"))


def _read_firmware(gpu: AmdSmiGpu, fw_list: Any) -> None:
    if not isinstance(fw_list, list):
        return
    for item in fw_list:
        if isinstance(item, dict):
            name = text_value(item.get("fw_name") or item.get("fw_id"))
            version = text_value(item.get("fw_version"))
            if name and version:
                gpu.firmware[name] = version


def _read_throttle(gpu: AmdSmiGpu, entry: dict[str, Any]) -> None:
    value = _find_key(entry, "indep_throttle_status")
    if value is None or isinstance(value, (dict, list)):
        return
    raw = 0 if value is False else number(value)
    if isinstance(raw, int) and raw >= 0:
        gpu.indep_throttle_status = raw
        gpu.throttle = decode_indep_throttle(raw)


def _find_key(node: Any, key: str, depth: int = 0) -> Any:
    """The first value under `key` anywhere in `node` (amd-smi moved fields between versions)."""
    if depth > 6:
        return None
    if isinstance(node, dict):
        if key in node:
            return node[key]
        children = node.values()
    elif isinstance(node, list):
        children = node
    else:
        return None
    for child in children:
        found = _find_key(child, key, depth + 1)
        if found is not None:
            return found
    return None


def _links_from_entry(entry: dict[str, Any]) -> list[AmdSmiLink]:
    src_index = _int(entry.get("gpu"))
    src_bdf = normalise_bdf(text_value(entry.get("bdf")))
    links: list[AmdSmiLink] = []
    if isinstance(entry.get("links"), list):
        for item in entry["links"]:
            if not isinstance(item, dict):
                continue
            links.append(
                AmdSmiLink(
                    src_index=src_index,
                    dst_index=_int(item.get("gpu")),
                    src_bdf=src_bdf,
                    dst_bdf=normalise_bdf(text_value(item.get("bdf"))),
                    link_type=text_value(item.get("link_type")),
                    weight=_int(item.get("weight")),
                    hops=_int(item.get("num_hops", item.get("hops"))),
                    status=text_value(item.get("link_status")),
                    bandwidth=text_value(item.get("bandwidth")),
                )
            )
        return links
    # Older topology shape: one dict per property, keyed by the peer ("gpu_1" or its BDF).
    link_types = entry.get("link_type")
    if isinstance(link_types, dict):
        weights = _section(entry, "weight")
        hops = _section(entry, "hops")
        access = _section(entry, "link_accessibility")
        for peer, kind in link_types.items():
            match = re.search(r"(\d+)$", str(peer))
            links.append(
                AmdSmiLink(
                    src_index=src_index,
                    dst_index=int(match.group(1)) if match and not normalise_bdf(peer) else None,
                    src_bdf=src_bdf,
                    dst_bdf=normalise_bdf(str(peer)),
                    link_type=text_value(kind),
                    weight=_int(weights.get(peer)),
                    hops=_int(hops.get(peer)),
                    status=text_value(access.get(peer)),
                )
            )
    return links


# --- plain table -------------------------------------------------------------------

_TABLE_HEADER = re.compile(r"\|\s*AMD-SMI\s+(\S+)")
_AMDGPU = re.compile(r"amdgpu version:\s*(\S+)")
_ROCM = re.compile(r"ROCm version:\s*(\S+)")
_VBIOS = re.compile(r"VBIOS version:\s*(\S+)")
_PLATFORM = re.compile(r"Platform:\s*(.+?)\s*\|?\s*$")
_ROW1_LEFT = re.compile(
    r"^\s*(?P<bdf>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+(?P<name>.+?)\s*$"
)
_ROW1_RIGHT = re.compile(
    r"^\s*(?P<mem_util>N/A|[\d.]+\s*%)\s+(?P<temp>N/A|[\d.]+\s*°?C)\s+(?P<uec>\S+)\s+(?P<power>\S+)\s*W\s*$"
)
_ROW2_LEFT = re.compile(r"^\s*(?P<gpu>\d+)\s+(?P<hip>\S+)\s+(?P<oam>\S+)\s+(?P<partition>\S+)\s*$")
_ROW2_RIGHT = re.compile(
    r"^\s*(?P<gfx>N/A|[\d.]+\s*%)\s+(?P<fan>N/A|[\d.]+(?:\s*%)?)\s+(?P<mem>\S+)\s*MB\s*$"
)
_PROCESS = re.compile(r"^\|\s*(?P<gpu>\d+)\s+(?P<pid>\d+)\s+(?P<name>\S+)")


@never_raises(_failed)
def parse_table(text: str, source: str = "amd-smi.txt") -> AmdSmiReport:
    """The table plain `amd-smi` prints: versions, and per GPU BDF, name, temperature,
    power used/cap, GFX use, fan and VRAM used/total."""
    report = AmdSmiReport(source=source, shape="table")
    header = _TABLE_HEADER.search(text)
    if header is None:
        report.error = cannot_read(source, "no amd-smi table header ('| AMD-SMI <version> ...')")
        return report
    report.amd_smi_version = header.group(1)
    for pattern, attr in ((_AMDGPU, "amdgpu_version"), (_ROCM, "rocm_version"), (_VBIOS, "vbios_version")):
        match = pattern.search(text)
        setattr(report, attr, match.group(1) if match else None)
    in_processes = False
    pending: AmdSmiGpu | None = None
    for line in text.splitlines():
        if "Processes:" in line:
            in_processes = True
            continue
        if line.strip().startswith("| Platform:"):
            platform = _PLATFORM.search(line)
            report.platform = platform.group(1).rstrip(" |") if platform else None
            continue
        if in_processes:
            process = _PROCESS.match(line)
            if process:
                report.processes.append(
                    AmdSmiProcess(int(process.group("gpu")), int(process.group("pid")), process.group("name"))
                )
            continue
        cells = [cell for cell in line.split("|")[1:-1]] if line.count("|") >= 3 else []
        if len(cells) != 2:
            continue
        left1, right1 = _ROW1_LEFT.match(cells[0]), _ROW1_RIGHT.match(cells[1])
        if left1 and right1:
            pending = _gpu_from_row1(left1, right1)
            continue
        left2, right2 = _ROW2_LEFT.match(cells[0]), _ROW2_RIGHT.match(cells[1])
        if pending is not None and left2 and right2:
            _complete_from_row2(pending, left2, right2)
            report.gpus.append(pending)
            pending = None
    if pending is not None:  # a table cut after the first row of a GPU
        report.gpus.append(pending)
    if not report.gpus:
        report.error = cannot_read(source, "the amd-smi table lists no GPU rows")
    return report


def _gpu_from_row1(left: re.Match[str], right: re.Match[str]) -> AmdSmiGpu:
    gpu = AmdSmiGpu(bdf=normalise_bdf(left.group("bdf")), name=left.group("name").strip())
    gpu.temperature_edge_c = _float(right.group("temp").replace("°", " ").replace("C", "").strip())
    used, _, cap = right.group("power").rpartition("/")
    gpu.power_w = _float(used)
    gpu.power_cap_w = _float(cap) or None  # "N/A/0 W" is an iGPU without a cap
    return gpu


def _complete_from_row2(gpu: AmdSmiGpu, left: re.Match[str], right: re.Match[str]) -> None:
    gpu.index = int(left.group("gpu"))
    gpu.hip_id = _int(left.group("hip"))
    gpu.gfx_activity_pct = _float(right.group("gfx"))
    gpu.fan_pct = _float(right.group("fan"))
    used, _, total = right.group("mem").rpartition("/")
    gpu.vram_used_mib = _float(used)
    gpu.vram_total_mib = _float(total)


# --- merging -----------------------------------------------------------------------


def merge(*reports: AmdSmiReport) -> list[AmdSmiGpu]:
    """One record per GPU from several outputs of the same node (static + metric + list).

    GPUs are matched by BDF when both sides have one, else by index; a value already set
    is kept, so pass the most authoritative report (static) first.
    """
    merged: list[AmdSmiGpu] = []
    for report in reports:
        for gpu in report.gpus:
            target = _match(merged, gpu)
            if target is None:
                merged.append(_copy(gpu))
                continue
            for name in AmdSmiGpu.__dataclass_fields__:
                mine, theirs = getattr(target, name), getattr(gpu, name)
                if isinstance(mine, dict):
                    setattr(target, name, {**theirs, **mine})
                elif mine is None and theirs is not None:
                    setattr(target, name, theirs)
    return sorted(merged, key=lambda g: (g.index is None, g.index or 0))


def _match(merged: list[AmdSmiGpu], gpu: AmdSmiGpu) -> AmdSmiGpu | None:
    for candidate in merged:
        if candidate.bdf and gpu.bdf:
            if candidate.bdf == gpu.bdf:
                return candidate
        elif candidate.index is not None and candidate.index == gpu.index:
            return candidate
    return None


def _copy(gpu: AmdSmiGpu) -> AmdSmiGpu:
    fields = {name: getattr(gpu, name) for name in AmdSmiGpu.__dataclass_fields__}
    fields["clocks"] = dict(gpu.clocks)
    fields["firmware"] = dict(gpu.firmware)
    return AmdSmiGpu(**fields)
